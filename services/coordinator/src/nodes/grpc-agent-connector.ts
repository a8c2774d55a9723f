import type { AgentService } from "@warden/proto";
import type { Client } from "@warden/grpc";
import type { Clock, Logger } from "@warden/common";
import type { AgentConnector } from "@warden/cluster";
import type { PeerGrant } from "./peer-directory.js";
import { agentPort, noLeaderEpoch, typedRefusal, type LeaderEpochProvider, type StaleEpochListener } from "./agent-port.js";

/** An agent's AgentService client: gRPC for a registered agent, in-process for the embedded one. */
export type AgentClient = Client<typeof AgentService>;

/** Re-opening a WatchBackends stream that ended, after this long. */
const watchRetryMs = 2_000;

/**
 * The node table's AgentConnector over AgentService clients: StopOrphan,
 * WatchBackends (re-opened while the node's watch is not aborted) and the
 * loader's AgentPort. Every command is stamped with `leaderEpoch()` (the
 * coordinator's leader epoch; default 0 = no HA).
 */
export function grpcAgentConnector(d: { readonly clock: Clock; readonly log: Logger; readonly connect: (address: string, nodeId: string) => AgentClient; readonly leaderEpoch?: LeaderEpochProvider; readonly onStaleEpoch?: StaleEpochListener; readonly peersFor?: (nodeId: string, artifacts: readonly { readonly sha256: string }[]) => PeerGrant }): AgentConnector<AgentClient> {
  const leaderEpoch = d.leaderEpoch ?? noLeaderEpoch;
  const watch = (nodeId: string, client: AgentClient, signal: AbortSignal, onExit: Parameters<AgentConnector<AgentClient>["watchExits"]>[3]): void => {
    void (async () => {
      try {
        for await (const ev of client.watchBackends({}, { signal })) {
          if (ev.event.case === "exited") {
            const x = ev.event.value;
            onExit(ev.incarnation, { exitCode: x.exitCode, signal: x.signal, intentional: x.intentional, lastStderrLine: x.lastStderrLine });
          }
        }
      } catch (err) {
        if (!signal.aborted) d.log.debug("WatchBackends ended", { nodeId, err: err instanceof Error ? err.message : String(err) });
      }
      // Heartbeats remain the source of truth; the watch is only for promptness.
      // The node table aborts the signal whenever the record is replaced or closed.
      if (!signal.aborted) {
        // One signal serves every retry: the listener goes when its timer fires.
        const onAbort = (): void => {
          cancel();
        };
        const cancel = d.clock.setTimer(watchRetryMs, () => {
          signal.removeEventListener("abort", onAbort);
          if (!signal.aborted) watch(nodeId, client, signal, onExit);
        });
        signal.addEventListener("abort", onAbort, { once: true });
      }
    })();
  };
  return {
    connect: d.connect,
    agentPort: (client, nodeId) => {
      const peersFor = d.peersFor;
      return agentPort(client, leaderEpoch, d.onStaleEpoch, peersFor === undefined ? undefined : (artifacts) => peersFor(nodeId, artifacts));
    },
    close(client) {
      client.close();
    },
    // Not async: a client that throws at once throws to the caller, as a direct call would.
    stopOrphan(client, o) {
      return client.stopOrphan({ pid: o.pid, address: o.address, force: false, reason: "orphan", leaderEpoch: leaderEpoch() }, { timeoutMs: 30_000 }).then(
        (r) => ({ alreadyGone: r.outcome.case === "alreadyGone" }),
        (err: unknown) => {
          throw typedRefusal(err, d.onStaleEpoch);
        },
      );
    },
    watchExits: watch,
  };
}
