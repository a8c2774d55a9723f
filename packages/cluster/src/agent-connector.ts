import type { OrphanProcess } from "@warden/proto";
import type { AgentPort } from "@warden/loader";

/** How a backend ended, as the agent's WatchBackends reports it. */
export interface BackendExit {
  readonly exitCode: number | undefined;
  readonly signal: string;
  readonly intentional: boolean;
  readonly lastStderrLine: string;
}

/**
 * The node table's way to its agents (the gRPC wiring lives in the
 * coordinator). `C` is the connector's client for one agent.
 */
export interface AgentConnector<C> {
  /** A client for the agent of node `nodeId` at `address` (under mutual TLS it must prove it is that node's, on every connection). */
  connect(address: string, nodeId: string): C;
  /** The loader's AgentPort over a client. */
  /** The loader's port to node `nodeId`'s agent. */
  agentPort(client: C, nodeId: string): AgentPort;
  close(client: C): void;
  /**
   * Asks the agent to stop an orphan (it re-checks the pid itself). Settles
   * with whether the process was already gone; rejects when the stop failed.
   */
  stopOrphan(client: C, orphan: OrphanProcess): Promise<{ readonly alreadyGone: boolean }>;
  /**
   * Follows the agent's backend exits until `signal` aborts, so an exit is
   * seen at once rather than at the next heartbeat (re-opening the stream
   * when it ends is the connector's).
   */
  watchExits(nodeId: string, client: C, signal: AbortSignal, onExit: (incarnation: string, exit: BackendExit) => void): void;
}
