import type { EvictionReason, StopCommand } from "./stop-command.js";

/**
 * Lifecycle states of an instance as the watchdog holds it.
 *
 * - `reserved`: admitted on a node, not spawned yet (no address). Counts as
 *   occupied. Leaves by `registerLoading` (→ loading) or `releaseReservation`.
 * - `loading`: spawned, not ready. Counts toward capacity, memory and group
 *   conflicts; never selected by a policy path. Leaves by `markReady`,
 *   `remove` (failed load, exit) or an explicit stop (→ pending).
 * - `ready`: routable. Leaves by any selection (→ pending) or `remove`.
 * - `freed`: a stop failed after `Free()` succeeded (settle row 3): accounted,
 *   not routable, its stop retried through an explicit `retry` stop.
 * - `pending`: detached for a stop in flight; invisible to selectors and to the
 *   loaded count, still occupied for admission. Leaves only by `settle`.
 */
export type InstanceStateName = "reserved" | "loading" | "ready" | "freed";

/** What the loader knows when a process is spawned (or adopted). */
export interface InstanceSpec {
  readonly nodeId: string;
  readonly model: string;
  /** Coordinator-minted ULID, unique per start. */
  readonly incarnation: string;
  /** `host:port` of the backend's gRPC server. */
  readonly address: string;
  /** The model's concurrency groups; when given, replaces the model's entry in the policy's group table. */
  readonly groups?: readonly string[];
  /** The model's pin; when given, adds or removes the model in the policy's pin table. */
  readonly pinned?: boolean;
  /** Memory estimate; 0 or absent means unknown (sorts last when size-aware). */
  readonly sizeBytes?: number;
  /** GPU index the agent assigned, if any (per-GPU memory reclaimer). */
  readonly gpu?: number;
}

/** One admission on a node (DESIGN §3.4 item 3). */
export interface AdmissionRequest {
  readonly nodeId: string;
  readonly model: string;
  /** The incarnation minted for this start; the reservation is keyed by it. */
  readonly incarnation: string;
  readonly groups?: readonly string[];
  readonly pinned?: boolean;
  readonly sizeBytes?: number;
  /**
   * Incarnations this admission must not select as victims (counted as
   * `spared` in the shortfall, never admitted over the limit): a replica load
   * spares its own model's replicas and those holding another model at its
   * min — evicting them only moves the shortfall, and the reconciler takes it
   * back (simulation seed 788: two floors on one full node, for ever).
   */
  readonly spare?: ReadonlySet<string>;
}

/**
 * Something on a node the watchdog does not own but must count (DESIGN §3.3):
 * a `leftover` (stop failed after the local half was dropped), an `orphan`
 * (live process without a coordinator-minted incarnation) or an
 * `unconfirmed` instance (a restarted coordinator's journal says it runs
 * there; the node has not reported since). Counts toward the node's limit,
 * groups and memory; never selectable: none can be stopped from here now.
 */
export interface OccupancyEntry {
  readonly kind: "leftover" | "orphan" | "unconfirmed";
  /** Stable key for display (incarnation, or pid for an orphan). */
  readonly key: string;
  readonly model: string | undefined;
  readonly groups: readonly string[];
  readonly sizeBytes: number;
}

/** A pending eviction, as shown by ListModels. */
export interface PendingEvictionView {
  readonly reason: EvictionReason;
  readonly force: boolean;
  readonly sinceMs: number;
  readonly command: StopCommand;
  /** The process was reported gone while the stop ran (exit, failed load). */
  readonly exited: boolean;
}

/** One instance in a snapshot (ListModels). */
export interface InstanceView {
  readonly nodeId: string;
  readonly model: string;
  readonly incarnation: string;
  readonly address: string | undefined;
  /** For a pending instance: the state it was detached from. */
  readonly state: InstanceStateName;
  readonly stateSinceMs: number;
  readonly pendingEviction: PendingEvictionView | undefined;
  readonly inFlight: number;
  readonly busySinceMs: number | undefined;
  readonly idleSinceMs: number | undefined;
  readonly lastUsedMs: number | undefined;
  readonly sizeBytes: number;
  readonly gpu: number | undefined;
  readonly pinned: boolean;
  readonly groups: readonly string[];
}
