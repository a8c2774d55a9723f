import type { BackendHandle } from "./ports.js";
import type { ModelSpec } from "./model-spec.js";
import type { ReportFloor } from "./ports.js";

/** How the loader holds an instance (DESIGN §1). */
export type Placement = "local" | "local-remote" | "remote-only";

/**
 * The loader's local half of one instance. Phases:
 * - `starting`: admitted and StartBackend sent, no address yet;
 * - `loading`: spawned (address known, registered loading in the watchdog);
 * - `ready`: routable once the watchdog also says ready.
 * Removed from the loader when the process is known gone, or — for a
 * local+remote or remote-only placement — before StopBackend is sent.
 */
export interface HeldInstance<H extends BackendHandle = BackendHandle> {
  readonly incarnation: string;
  readonly model: string;
  readonly nodeId: string;
  readonly spec: ModelSpec;
  placement: Placement;
  phase: "starting" | "loading" | "ready";
  address: string | undefined;
  backend: H | undefined;
  gpu: number | undefined;
  readonly startedAtMs: number;
  /** From the start's Spawned: reports at or below it predate the process (reconcile-inventory.ts). */
  reportFloor?: ReportFloor;
  /** Adopted: the load digest its node reported (load-digest.ts); unset when the spec's own is right (started here, or an agent that does not say). */
  readonly startedWith?: string;
}

/** A routed call's hold on an instance: complete it exactly once (idempotent). */
export interface Lease<H extends BackendHandle = BackendHandle> {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly address: string;
  readonly model: string;
  readonly backend: H;
  complete(): void;
}

/** A routable replica as a {@link RouteHint} sees it. */
export interface RouteCandidate {
  readonly incarnation: string;
  /** Calls in flight on it now (the watchdog's count). */
  readonly inFlight: number;
}

/**
 * A call's own say in which replica it goes to (prefix-affinity routing):
 * asked with the routable replicas — ready, not stopping, on a reachable
 * node — only when there are two or more; its answer is taken only when it
 * names one of them (anything else: the default, `leastLoaded`). Must not
 * throw; runs synchronously inside the routing turn.
 */
export interface RouteHint {
  prefer(candidates: readonly RouteCandidate[], leastLoaded: string): string | undefined;
}

/**
 * What an UnloadModel came to (DESIGN §4: the real outcome). For a model with
 * several replicas: the worst replica's outcome, with every replica's in
 * `replicas` (absent for one instance).
 */
export type UnloadOutcome = (
  | { readonly t: "stopped"; readonly incarnation: string }
  | { readonly t: "registered-again"; readonly incarnation: string; readonly error: string }
  | { readonly t: "leftover"; readonly incarnation: string; readonly error: string }
  | { readonly t: "not-loaded" }
) & { readonly replicas?: readonly UnloadOutcome[] };

/** Where an instance found only in a node's inventory lives. */
export interface InventoryHit {
  readonly nodeId: string;
  readonly address: string;
  readonly incarnation: string;
  /**
   * The agent listed it READY with no stop requested. Anything else (spawning,
   * loading, stopping) has no backend known to serve: never adoptable as routable.
   */
  readonly ready: boolean;
}

/** The answer of the node inventories for a model the loader does not hold. */
export type InventoryAnswer =
  | { readonly t: "found"; readonly hits: readonly InventoryHit[] }
  | { readonly t: "absent" }
  /** An unreachable node's last inventory had the model, or a node has reported none yet. */
  | { readonly t: "unknown"; readonly reason: string; /** A node has reported no inventory yet (not merely unreachable). */ readonly noInventoryYet?: true };

/** Asks the nodes' last inventories; a port so the cluster issue can refine it. */
export interface InventoryPort {
  findModel(model: string): InventoryAnswer;
  /**
   * The loader learned that `incarnation` on `nodeId` is gone for good (its
   * stop confirmed, or its exit reported). Inventories reported before this
   * moment must no longer show it: they are fenced from here on.
   */
  confirmedGone?(nodeId: string, incarnation: string): void;
}

/** Chooses a node for a load; re-asked on every admission retry. */
export interface PlacementPort {
  /**
   * Ordered candidates; the first is tried. Empty with a reason when nothing
   * fits; `transient` when no node could judge the model (none ready: none
   * registered, or all unreachable), so the load fails UNAVAILABLE, not
   * FAILED_PRECONDITION.
   */
  choose(spec: ModelSpec): { readonly nodeId: string } | { readonly nodeId: undefined; readonly reason: string; readonly transient?: true };
  /**
   * Registered but no inventory received yet: a load naming the node waits for it, as placement
   * does (a new leader's operator load beside a backend an ex-leader started and never journaled).
   * Absent: every node has reported.
   */
  awaitingInventory?(nodeId: string): boolean;
}
