import type { ReplicaSettings } from "./model-spec.js";

/**
 * What the loader reports about one model's replicas: ListModels,
 * `warden models ls`, metrics and ExplainPlacement read it.
 */
export interface ReplicaStatus {
  readonly model: string;
  /** The model's settings now: the config's, or a ScaleModel override. */
  readonly settings: ReplicaSettings;
  /** What the reconciler aims for now: at least `min`, more while load demands it, at most `max`. */
  readonly desired: number;
  readonly ready: number;
  /** Reserved, starting or loading. */
  readonly loading: number;
  /** Pending eviction or being stopped. */
  readonly stopping: number;
  /** Leftovers of the model (they still count on their nodes). */
  readonly leftovers: number;
  /** Calls waiting because no replica is ready. */
  readonly queued: number;
  /** The scale-up circuit breaker, when open: the next attempt is not before `retryAtMs` (monotonic). */
  readonly blocked: { readonly error: string; readonly failures: number; readonly retryAtMs: number } | undefined;
  /** A rollout in progress: ready replicas with the current load settings, replicas with older ones (not being stopped), the count it keeps. */
  readonly rollout?: { readonly current: number; readonly stale: number; readonly keep: number };
}

/** A ScaleModel request: fields left out keep their value. */
export interface ScalePatch {
  readonly min?: number;
  readonly max?: number;
}
