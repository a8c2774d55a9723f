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
  /** Set while some replicas run with load settings older than the config's (a rollout). */
  readonly rollout?: RolloutView;
}

/**
 * A rollout: the model's load settings changed and `stale` replicas still run
 * with the old ones. `keep` is how many replicas the rollout keeps ready (the
 * live count when it began, within 1..max); it runs one above that at a time.
 */
export interface RolloutView {
  readonly keep: number;
  /** Ready stale replicas with nothing in flight, and since when they are idle. */
  readonly staleIdle: readonly { readonly incarnation: string; readonly idleSinceMs: number }[];
  /** Ready replicas started with the current settings. */
  readonly freshReady: number;
}

export type ReplicaDecision =
  | { readonly t: "none" }
  | { readonly t: "load" }
  | { readonly t: "scale-down"; readonly incarnation: string }
  /** Start a replacement beside the stale replicas; its load may take the model to `upTo` live. */
  | { readonly t: "rollout-load"; readonly upTo: number }
  /** A replacement is ready: stop this stale replica. */
  | { readonly t: "rollout-stop"; readonly incarnation: string };

const none: ReplicaDecision = Object.freeze({ t: "none" });

export function decideReplicas(v: ReplicaView): ReplicaDecision {
  if (v.live < v.min) return !v.loadInFlight && v.breakerAllows && v.live + v.stopping < v.max ? { t: "load" } : none;
  if (v.rollout !== undefined && v.live <= v.rollout.keep + 1) return decideRollout(v, v.rollout);
  // Planted bug "scale-down-below-min": the floor forgets `min`.
  if (v.ready <= (isPlanted("scale-down-below-min") ? 1 : Math.max(v.min, 1))) return none;
  let victim: { readonly incarnation: string; readonly idleSinceMs: number } | undefined;
  for (const r of v.idle) {
    if (v.nowMs - r.idleSinceMs < v.scaleDownAfterMs) continue;
    if (victim === undefined || r.idleSinceMs < victim.idleSinceMs) victim = r;
  }
  return victim === undefined ? none : { t: "scale-down", incarnation: victim.incarnation };
}

/**
 * One rollout step, surge one: while `keep` or fewer replicas are live, start
 * one replacement with the current settings (normal placement and admission;
 * the stale replicas are spared, so it runs beside them or not at all); once
 * one more than `keep` is live and a current replica is ready, stop the stale
 * replica idle longest. Ready replicas never drop below `keep`. Nothing while
 * a load is in flight or the breaker is open (a replacement that does not fit
 * leaves the stale replicas serving: a bad new config never takes working
 * replicas down). A busy stale replica waits until it is idle.
 */
function decideRollout(v: ReplicaView, r: RolloutView): ReplicaDecision {
  if (v.loadInFlight) return none;
  if (v.live > r.keep) {
    if (r.freshReady === 0) return none;
    let victim: { readonly incarnation: string; readonly idleSinceMs: number } | undefined;
    for (const x of r.staleIdle) if (victim === undefined || x.idleSinceMs < victim.idleSinceMs) victim = x;
    return victim === undefined ? none : { t: "rollout-stop", incarnation: victim.incarnation };
  }
  return v.breakerAllows && v.live + v.stopping <= r.keep ? { t: "rollout-load", upTo: r.keep + 1 } : none;
}

/**
 * How many replicas a rollout keeps ready: the live count when it began
 * (`began`, undefined on its first pass: `live` now), never below `min` (a
 * rollout that begins while the floor is still being restored keeps the
 * floor) nor 1, never above `max` (a lowered max lowers it).
 */
export function rolloutKeep(began: number | undefined, live: number, min: number, max: number): number {
  return Math.max(1, min, Math.min(began ?? live, max));
}
