import type { ForeignProcess, OrphanProcess } from "@warden/proto";
import type { Clock } from "@warden/common";
import type { AgentConnector } from "./agent-connector.js";
import type { Adoption } from "./reconcile-inventory.js";

export type NodeEventKind = "registered" | "unreachable" | "lost" | "lost-by-operator" | "ready";

export interface NodeTableOptions<C> {
  /** `now()` and `wallNow()` only: the periodic checkHealth call is the owner's. */
  readonly clock: Pick<Clock, "now" | "wallNow">;
  readonly connector: AgentConnector<C>;
  /** Heartbeats older than this make a node unreachable. */
  readonly graceMs: number;
  /** Unreachable this long → lost. @default 10 min */
  readonly lostAfterMs?: number;
  /** `reason` is the operator's free text for "lost-by-operator", empty otherwise. */
  readonly onNodeEvent: (nodeId: string, kind: NodeEventKind, labels: Record<string, string>, reason?: string) => void;
  /** Incarnations of the open stop intents on `nodeId` (the outbox's); read once per applied inventory. */
  readonly openIntentsOn?: (nodeId: string) => Iterable<string>;
  /**
   * Open stop intents on `nodeId` the loader does not track whose incarnation
   * two applied inventories of the node in a row lacked (gone-intents.ts;
   * never empty): the process is gone (stopped late, or exited), so the
   * intent is done. Needs openIntentsOn.
   */
  readonly onIntentsGone?: (nodeId: string, gone: readonly string[]) => void;
  /** Orphans older than this are stopped (reason orphan). @default 2 min */
  readonly orphanGraceMs?: number;
  /**
   * Orphans first seen in one heartbeat, in report order (never empty): one
   * call per node per heartbeat, so a peer reporting many orphans makes one
   * coalesced `orphan.adopted` event, not one each.
   */
  readonly onOrphansAdopted?: (nodeId: string, adopted: readonly OrphanProcess[]) => void;
  /** An orphan is being stopped, was stopped, or its stop failed. */
  readonly onOrphan?: (nodeId: string, orphan: OrphanProcess, kind: "stopping" | "stopped" | "failed", detail: string) => void;
  /**
   * A heartbeat showed foreign processes the node's previous one did not:
   * called once per such heartbeat with the new ones (coalesced, never one
   * call per process).
   */
  readonly onForeign?: (nodeId: string, fresh: readonly ForeignProcess[]) => void;
  /** Mass unreachability began or ended. */
  readonly onPauseChange?: (paused: boolean, unreachable: number, total: number) => void;
  /**
   * This coordinator's Warden version. An agent registering with another one
   * is reported through onVersionMismatch once per change, not per
   * re-registration: mixed versions are allowed but worth knowing.
   */
  readonly version?: string;
  /** `agentVersion` is "" from agents before 0.2. */
  readonly onVersionMismatch?: (nodeId: string, agentVersion: string) => void;
  /** An inventory entry was adopted by the loader (for the owner's log). */
  readonly onAdopted?: (a: Adoption) => void;
  /** Cap on registered nodes; a new node past it is RESOURCE_EXHAUSTED. @default NodeTable.maxNodes (4096) */
  readonly maxNodes?: number;
  /** Cap on the entries a delta heartbeat may leave a node's inventory with (the full one's cap). @default 4096 */
  readonly maxInventory?: number;
  /**
   * Whether an empty delta on a settled node skips the inventory reconcile
   * (unchanged-heartbeat.ts; every decision stays the same). False reconciles
   * every heartbeat whole, as before — for comparisons (the simulation's,
   * `npm run bench -- heartbeat-delta`). @default true
   */
  readonly skipUnchangedReconcile?: boolean;
  /**
   * Test-only (the simulation's differential mode): called instead of the
   * skip on each heartbeat that would skip the reconcile, with the full
   * reconcile of that heartbeat, which it must run — so a checker can see
   * whether the full reconcile changes anything the skip would have left.
   */
  readonly checkUnchanged?: (nodeId: string, reconcile: () => void) => void;
}
