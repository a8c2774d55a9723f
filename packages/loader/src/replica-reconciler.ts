import { isPlanted } from "@warden/common";

/**
 * The replica reconciler's decision for one model on one tick,
 * a pure function over a small view so it is easy to test:
 *
 * - below `min` (ready + loading): start one load for the floor, unless a
 *   load of the model is in flight, its circuit breaker is open, or the
 *   replicas being stopped would take it past `max` should their stops fail
 *   (settle row 3 registers them again) — then it waits for their settles;
 * - more than `max(min, 1)` ready: stop the replica idle longest (0 in
 *   flight, idle for at least `scaleDownAfterMs`) — one per model per tick.
 *   The floor is at least 1: the model's last replica is left to the idle
 *   watchdog (the policy's or the model's idle timeout), so the default
 *   (min 0, max 1) behaves exactly as a single instance always did.
 */
export interface ReplicaView {
  readonly min: number;
  readonly max: number;
  readonly scaleDownAfterMs: number;
  /** Replicas counting toward max: admitted, loading or ready, not stopping. */
  readonly live: number;
  /** Replicas pending eviction or freed (held: a failed stop registers them again). */
  readonly stopping: number;
  /** Ready replicas not pending eviction (scale-down never takes the last ready ones). */
  readonly ready: number;
  readonly loadInFlight: boolean;
  /** The breaker lets a replica load start now. */
  readonly breakerAllows: boolean;
  /** Ready replicas with nothing in flight, and since when they are idle. */
  readonly idle: readonly { readonly incarnation: string; readonly idleSinceMs: number }[];
  readonly nowMs: number;
}

export type ReplicaDecision = { readonly t: "none" } | { readonly t: "load" } | { readonly t: "scale-down"; readonly incarnation: string };

const none: ReplicaDecision = Object.freeze({ t: "none" });

export function decideReplicas(v: ReplicaView): ReplicaDecision {
  if (v.live < v.min) return !v.loadInFlight && v.breakerAllows && v.live + v.stopping < v.max ? { t: "load" } : none;
  // Planted bug "scale-down-below-min": the floor forgets `min`.
  if (v.ready <= (isPlanted("scale-down-below-min") ? 1 : Math.max(v.min, 1))) return none;
  let victim: { readonly incarnation: string; readonly idleSinceMs: number } | undefined;
  for (const r of v.idle) {
    if (v.nowMs - r.idleSinceMs < v.scaleDownAfterMs) continue;
    if (victim === undefined || r.idleSinceMs < victim.idleSinceMs) victim = r;
  }
  return victim === undefined ? none : { t: "scale-down", incarnation: victim.incarnation };
}
