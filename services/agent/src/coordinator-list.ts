import { nullLogger, type Logger } from "@warden/common";
import { createH2Client, createLeaderFollowingClient, type H2ClientOptions, type LeaderFollowingOptions } from "@warden/grpc";
import { NodeService } from "@warden/proto";
import type { NodeServicePort } from "./node-heartbeat.js";
import { StreamedHeartbeats } from "./streamed-heartbeats.js";

export interface CoordinatorListOptions {
  /** `--coordinator` addresses: 1..8 host:port, the first tried first (parseHostPortList). */
  addresses: readonly string[];
  /** Limits, TLS and the node's bearer header for every coordinator's client. */
  clientOptions?: H2ClientOptions;
  logger?: Logger;
  /** Test seam: the per-address client factory and retry knobs of the leader-following client. */
  follow?: Omit<LeaderFollowingOptions<typeof NodeService>, "clientOptions" | "onLeaderChange" | "onIgnoredHint" | "idempotent">;
  /** Heartbeats on one NodeService.HeartbeatStream (unary where the coordinator lacks it); false: unary Heartbeats only. @default true */
  heartbeatStream?: boolean;
}

/** The heartbeat's NodeService over several coordinators, plus where it goes now. */
export interface CoordinatorList extends NodeServicePort {
  /** The coordinator the next call tries first (the last that answered). */
  currentAddress(): string;
  close(): void;
}

/**
 * NodeService over the HA coordinators: Register and heartbeats go
 * to the leader (heartbeats on one HeartbeatStream opened after each
 * Register, unary against a coordinator without it: streamed-heartbeats.ts), following a standby's in-list hint (createLeaderFollowingClient).
 * Both are safe to send twice — Register is idempotent and a heartbeat's
 * sequence lets the coordinator drop a repeat — so a dropped connection also
 * moves on. When a heartbeat is answered by another coordinator than the one
 * this node last registered with (the leader changed), the answer says
 * `registerRequired`, so the heartbeat loop registers with the new leader at
 * once instead of waiting for it to ask. Used by one caller at a time (the
 * heartbeat loop), so the answering address is the current one.
 */
export function coordinatorList(options: CoordinatorListOptions): CoordinatorList {
  const logger = (options.logger ?? nullLogger).child({ component: "coordinator-list" });
  const clientOptions = options.clientOptions ?? {};
  // The lean client: it honours each attempt's liveness bound (answerWithinMs), so a frozen
  // leader costs the heartbeat about 2 s before it tries the others, and it redials at once
  // (no channel reconnect backoff) when a member comes back.
  const client = createLeaderFollowingClient(NodeService, options.addresses, {
    connect: (address) => createH2Client(NodeService, address, clientOptions),
    ...options.follow,
    idempotent: () => true,
    onLeaderChange: (address, previous) => {
      logger.info(`following the coordinator leader at ${address}`, { address, previous });
    },
    onIgnoredHint: (hint, from) => {
      logger.warn("a coordinator named a leader outside --coordinator; not following it", { hint, from });
    },
  });
  let registeredWith: string | undefined;
  // The stream opens on the current address (the one just registered with) and ends at every Register.
  const streamed = options.heartbeatStream === false ? undefined : new StreamedHeartbeats({ calls: { stream: (requests, o) => client.heartbeatStream(requests, o), unary: (request, o) => client.heartbeat(request, o) }, logger });
  return {
    async register(request, o) {
      streamed?.reset();
      const r = await client.register(request, o);
      registeredWith = client.currentAddress();
      return r;
    },
    async heartbeat(request, o) {
      const r = streamed === undefined ? await client.heartbeat(request, o) : await streamed.heartbeat(request, o);
      const at = client.currentAddress();
      if (registeredWith !== undefined && at !== registeredWith) return { coordinatorEpoch: r.coordinatorEpoch, registerRequired: true };
      return r;
    },
    currentAddress: () => client.currentAddress(),
    close() {
      streamed?.close();
      client.close();
    },
  };
}
