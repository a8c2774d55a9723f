import { wardenVersion, type Clock, type Logger } from "@warden/common";
import { NodeTable, type HeartbeatAnswer, type NodeRecord as ClusterNodeRecord, type NodeTableOptions } from "@warden/cluster";
import { grpcAgentConnector, type AgentClient } from "./grpc-agent-connector.js";
import { PeerDirectory } from "./peer-directory.js";

export type { NodeHealthState } from "@warden/cluster";
export { memoryReading } from "@warden/cluster";

/** One registered node as the coordinator knows it (its agent reached over AgentService). */
export type NodeRecord = ClusterNodeRecord<AgentClient>;

export interface NodeRegistryOptions extends Omit<NodeTableOptions<AgentClient>, "clock" | "connector" | "onAdopted" | "version" | "onVersionMismatch"> {
  readonly clock: Clock;
  readonly log: Logger;
  /** Makes a gRPC client for node `nodeId`'s agent at `address`. */
  readonly connect: (address: string, nodeId: string) => AgentClient;
  /** The coordinator's leader epoch stamped on every agent command. @default () => 0n (no HA) */
  readonly leaderEpoch?: () => bigint;
  /** An agent refused a command as from an older leader epoch: a newer coordinator leads. */
  readonly onStaleEpoch?: (newestSeen: bigint, detail: string) => void;
  /** A heartbeat of a registered node was applied (its inventory reconciled), in the same turn (HA: a restored drain resumes). */
  readonly onHeartbeatApplied?: (nodeId: string) => void;
  /** Name peers for artifact pulls (config `peerFetch`). @default true */
  readonly peerFetch?: boolean;
}

/**
 * The coordinator's node table (@warden/cluster's NodeTable) wired to its
 * agents over AgentService: gRPC clients, WatchBackends, StopOrphan, and the
 * log. The decisions are the package's; the periodic checkHealth is the
 * coordinator's.
 */
export class NodeRegistry extends NodeTable<AgentClient> {
  private readonly onHeartbeatApplied: ((nodeId: string) => void) | undefined;
  /** Peer sources and tickets for the starts sent to these nodes (peer-directory.ts). */
  readonly peers: PeerDirectory;

  constructor(o: NodeRegistryOptions) {
    const { log, connect, leaderEpoch, onStaleEpoch, onHeartbeatApplied, peerFetch, ...rest } = o;
    // The directory needs the table, the table its connector: the connector reaches the directory once both exist.
    const late: { directory?: PeerDirectory } = {};
    super({
      ...rest,
      connector: grpcAgentConnector({ clock: o.clock, log, connect, peersFor: (nodeId, artifacts) => (late.directory as PeerDirectory).grant(nodeId, artifacts), ...(leaderEpoch === undefined ? {} : { leaderEpoch }), ...(onStaleEpoch === undefined ? {} : { onStaleEpoch: (e) => { onStaleEpoch(e.newestSeen, e.rawMessage); } }) }),
      version: wardenVersion,
      onVersionMismatch: (nodeId, agentVersion) => {
        log.warn("agent runs a different Warden version than the coordinator", { nodeId, agentVersion: agentVersion === "" ? "unknown (before 0.2)" : agentVersion, coordinatorVersion: wardenVersion });
      },
      onAdopted: (a) => {
        if (a.as === "remote-only") log.info("adopted instance as remote-only", { nodeId: a.nodeId, model: a.model, incarnation: a.incarnation });
        else log.info("adopted instance as leftover", { nodeId: a.nodeId, model: a.model, incarnation: a.incarnation, foundBy: a.foundBy });
      },
    });
    this.onHeartbeatApplied = onHeartbeatApplied;
    this.peers = new PeerDirectory({ clock: o.clock, nodes: () => this.list(), node: (id) => this.get(id), ...(peerFetch === undefined ? {} : { enabled: peerFetch }) });
    late.directory = this.peers;
  }

  override receive(hb: Parameters<NodeTable<AgentClient>["receive"]>[0]): HeartbeatAnswer {
    const answer = super.receive(hb);
    if (answer === "ok") this.onHeartbeatApplied?.(hb.nodeId);
    return answer;
  }
}
