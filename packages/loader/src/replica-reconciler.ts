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
 *   (min 0, max 1) behaves exactly as a single instance always did;
 * - more settled ready replicas than `max` (an operator or a reload lowered
 *   it): stop the least busy at once, without waiting `scaleDownAfterMs`
 *   ({@link decideAboveMax}).
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
  /** What a lowered `max` needs (undefined: the prompt scale-down is not considered). */
  readonly aboveMax?: AboveMaxView;
}

/**
 * The model's replicas as a lowered `max` sees them. Only settled replicas
 * count: a replica still loading, a load in admission, one known only from
 * the journal or a move in progress make the count a moment's, not the
 * model's (a drain move runs one more for a while; after a restart adopted
 * replicas are counted before every node has reported).
 */
export interface AboveMaxView {
  /** Ready replicas, not pending eviction, on reachable nodes: calls in flight and last use (-Infinity: never). */
  readonly settled: readonly { readonly incarnation: string; readonly inFlight: number; readonly lastUsedMs: number }[];
  /** Replicas counted toward `max` that are not ready: loading, in admission, journal-only (unconfirmed). */
  readonly unsettled: number;
  /** A drain move of the model is queued or running. */
  readonly moving: boolean;
  /** The recovery window after a start or takeover is over (admission open). */
  readonly recovered: boolean;
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
  | { readonly t: "rollout-stop"; readonly incarnation: string }
  /** More settled replicas than `max`: stop this one now (reason scale-down, cause max). */
  | { readonly t: "above-max"; readonly incarnation: string };

const none: ReplicaDecision = Object.freeze({ t: "none" });

export function decideReplicas(v: ReplicaView): ReplicaDecision {
  if (v.live < v.min) return !v.loadInFlight && v.breakerAllows && v.live + v.stopping < v.max ? { t: "load" } : none;
  if (v.rollout !== undefined) return decideRollout(v, v.rollout);
  const over = v.aboveMax === undefined ? undefined : decideAboveMax(v, v.aboveMax);
  if (over !== undefined) return over;
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
 * A lowered `max`: when more settled ready replicas run than `max`, the least
 * busy (fewest calls in flight, then least recently used) is stopped at once
 * through the normal graceful stop (it takes no new calls and its calls in
 * flight finish first) — one per pass, so the count steps down. Never while
 * the picture is a moment's: a load of the model in flight or a replica not
 * ready yet (it may be the one a lowered max still wants), a drain move
 * (it runs one more until its old replica stops), a rollout (it runs one more
 * until the stale replica stops; a lowered max lowers what it keeps), the
 * recovery window (nodes still to report their replicas) or replicas known
 * only from the journal. Never below `max` ≥ max(min, 1). Undefined: the
 * idle-based rules decide.
 */
export function decideAboveMax(v: ReplicaView, a: AboveMaxView): ReplicaDecision | undefined {
  if ((v.rollout !== undefined || v.loadInFlight || a.moving || !a.recovered || a.unsettled > 0)) return undefined;
  if (a.settled.length <= Math.max(v.max, v.min, 1)) return undefined;
  let victim: AboveMaxView["settled"][number] | undefined;
  for (const r of a.settled) {
    if (victim === undefined || r.inFlight < victim.inFlight || (r.inFlight === victim.inFlight && r.lastUsedMs < victim.lastUsedMs)) victim = r;
  }
  return victim === undefined ? undefined : { t: "above-max", incarnation: victim.incarnation };
}

/**
 * One rollout step, surge one: while `keep` or fewer replicas are live, start
 * one replacement with the current settings (normal placement and admission;
 * the stale replicas are spared, so it runs beside them or not at all); once
 * one more than `keep` is live and a current replica is ready, stop the stale
 * replica idle longest. The same when more than `keep` run, all ready, none
 * current: a lowered max lowered `keep` (without it the rollout waited for a
 * replacement it never started: two stale replicas of a model whose max went
 * to 1 with the settings ran for good). Ready replicas never drop below `keep`. Nothing while
 * a load is in flight or the breaker is open (a replacement that does not fit
 * leaves the stale replicas serving: a bad new config never takes working
 * replicas down). A busy stale replica waits until it is idle.
 */
function decideRollout(v: ReplicaView, r: RolloutView): ReplicaDecision {
  if (v.loadInFlight) return none;
  if (v.live > r.keep) {
    // Nothing current ready and some still loading (or known only from the journal): wait for them.
    if (r.freshReady === 0 && v.ready < v.live) return none;
    // Live counts replicas that are not ready (a load still in admission, journal-only ones): a stop
    // must leave `keep` READY ones, whatever is on its way (a load waiting for a node's first
    // inventory made live one more than ready, and the stop left one ready of min 2).
    if (v.ready - 1 < r.keep) return none;
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
