import { Backend } from "@warden/proto";
import { isPlanted } from "@warden/common";
import { createH2Client, type H2Client } from "@warden/grpc";
import type { BackendConnector, BackendHandle } from "@warden/loader";

/** The coordinator's local half of a backend: a gRPC client on its address. */
export interface BackendClientHandle extends BackendHandle {
  readonly client: H2Client<typeof Backend>;
}

/** The handle over one backend's client: Free and close. */
export function backendHandle(client: H2Client<typeof Backend>): BackendClientHandle {
  return {
    client,
    async free(options) {
      const r = await client.free({}, { signal: options.signal, timeoutMs: options.timeoutMs });
      if (!r.success && r.message !== "") throw new Error(`Free: ${r.message}`);
    },
    close() {
      client.close();
    },
  };
}

/**
 * HA: every backend Free goes through the leader fence. The stop sequence's
 * Free is the one call that reaches a backend from the coordinator directly,
 * not through an agent (which checks the command's epoch): `leaderEpoch`
 * throws (UNAVAILABLE "not the leader") unless this term holds the lease at
 * the moment the call is sent, so a coordinator resumed after a pause past
 * its lease frees nothing. Routed calls are not fenced (a paused leader keeps
 * serving inference).
 */
export function fencedBackendConnector<H extends BackendHandle>(inner: BackendConnector<H>, leaderEpoch: () => bigint): BackendConnector<H> {
  return {
    ...inner,
    connect(address, target) {
      const h = inner.connect(address, target);
      return {
        ...h,
        async free(options) {
          // Planted bug "free-past-fence": Free() sent without the fence.
          if (!isPlanted("free-past-fence")) leaderEpoch();
          await h.free(options);
        },
      };
    },
  };
}

/** Connects to backends over plaintext gRPC (LocalAI Backend protocol); coordinator-transport.ts adds TLS and the backends' bearer token where configured. */
export const grpcBackendConnector: BackendConnector<BackendClientHandle> = {
  connect(address: string): BackendClientHandle {
    // The hot proxy hop: a lean HTTP/2 client rather than a grpc-js channel (see createH2Client).
    return backendHandle(createH2Client(Backend, address));
  },
};
