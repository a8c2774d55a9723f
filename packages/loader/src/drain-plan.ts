/**
 * The drain's decision for one ready replica on a draining node
 * ("drain moves replicas one at a time without dropping below min where room
 * exists"), a pure function over a small view so it is easy to test. The
 * drain asks it again after every wait and every replacement load, one
 * replica of a model at a time:
 *
 * - the other ready replicas already keep the model at `min`: stop it now
 *   (replicas above min are simply stopped);
 * - a load of the model is in flight (a scale-up, the reconciler, an earlier
 *   replacement): wait for it and ask again — one move at a time per model;
 * - otherwise start one replacement on another node (normal placement and
 *   admission), and stop the drained one only once that is ready — unless no
 *   room exists: the replicas off the draining nodes would exceed `max`, the
 *   model's breaker is open, placement finds no node, or replacements failed
 *   `maxReplaceAttempts` times (or were deferred `maxDeferrals` times: the
 *   drain waits a retry interval after each deferral). Then it is stopped as before (the model dips
 *   below min; the breaker and the reconciler report and restore it).
 *
 * During a move the drained replica and its replacement both run: the model
 * has one replica more than the replicas off draining nodes, which never
 * exceed `max`.
 */
export interface DrainStepView {
  readonly min: number;
  readonly max: number;
  /** Ready replicas not pending eviction, the drained one excluded (others on draining nodes included: they move after it). */
  readonly readyOthers: number;
  /** Replicas off draining nodes that count toward max: live and being stopped (a failed stop registers one again). */
  readonly countedElsewhere: number;
  readonly loadInFlight: boolean;
  /** The model's scale breaker lets a replica load start now. */
  readonly breakerAllows: boolean;
  /** Why placement finds no node for another replica; undefined when it finds one. */
  readonly noRoom: string | undefined;
  /** Replacement loads already tried for this replica that failed or ended without ready. */
  readonly attempts: number;
  /** Replacement loads deferred (a node has not reported its inventory yet, replicas adopted meanwhile), and how many may be. */
  readonly deferrals: number;
  readonly maxDeferrals: number;
}

export type DrainStep =
  | { readonly t: "stop"; readonly why: "floor-kept" }
  | { readonly t: "wait" }
  | { readonly t: "replace" }
  | { readonly t: "stop"; readonly why: "no-room"; readonly detail: string };

/** Replacement loads tried per drained replica before it is stopped without one. */
export const maxReplaceAttempts = 2;

export function decideDrainStep(v: DrainStepView): DrainStep {
  if (v.readyOthers >= v.min) return { t: "stop", why: "floor-kept" };
  if (v.loadInFlight) return { t: "wait" };
  const noRoom = (detail: string): DrainStep => ({ t: "stop", why: "no-room", detail });
  if (v.countedElsewhere + 1 > v.max) return noRoom(`${String(v.countedElsewhere)} replicas off draining nodes already (max ${String(v.max)})`);
  if (!v.breakerAllows) return noRoom("scale-up blocked (breaker open)");
  if (v.noRoom !== undefined) return noRoom(v.noRoom);
  if (v.attempts >= maxReplaceAttempts) return noRoom(`${String(v.attempts)} replacement loads failed`);
  if (v.deferrals >= v.maxDeferrals) return noRoom(`replacement deferred ${String(v.deferrals)} times`);
  return { t: "replace" };
}
