import { isPlanted } from "@warden/common";
import type { LoaderState } from "./loader-state.js";
import type { HeldInstance, RouteCandidate, RouteHint } from "./loader-types.js";
import type { BackendHandle } from "./ports.js";

/** What routing sees of one model's replicas at one moment. */
export interface ReplicaChoice<H extends BackendHandle> {
  /** The routable replica with the fewest calls in flight, ties by least recently used. */
  readonly best: HeldInstance<H> | undefined;
  readonly bestInFlight: number;
  /**
   * Replicas that count toward `max`: admitted, starting, loading or ready —
   * not pending eviction, not freed; a load still in admission counts; so do
   * unconfirmed ones; leftovers never do (they are not held).
   */
  readonly live: number;
  /**
   * Held replicas pending eviction or freed. A failed stop registers them
   * again (settle row 3), so new replica loads count them toward `max` too:
   * the count never exceeds max, whatever the stops come to.
   */
  readonly stopping: number;
  /** A replica pending eviction or freed: calls wait for its settle when none is routable. */
  readonly settling: string | undefined;
  /** A ready replica on an unreachable node (accounted, never routed). */
  readonly unreachable: HeldInstance<H> | undefined;
  /** A held replica not ready yet. */
  readonly starting: string | undefined;
  /**
   * Replicas known only from a restarted coordinator's journal, on nodes not
   * heard from yet (counted in `live`: the node may come back with them).
   */
  readonly unconfirmed: number;
}

/**
 * Picks the replica a call goes to: ready in the loader and in the watchdog,
 * not pending eviction, stopping, freed or a leftover, on a reachable node;
 * the fewest in flight wins, then the oldest last use, then the oldest
 * replica. O(replicas of the model) with O(1) lookups each — no copies, no
 * scan of other models.
 */
export function chooseReplica<H extends BackendHandle>(s: LoaderState<H>, model: string): ReplicaChoice<H> {
  // Planted bug "route-to-stopping": an instance pending eviction stays routable.
  const routeToStopping = isPlanted("route-to-stopping");
  let best: HeldInstance<H> | undefined;
  let bestInFlight = Infinity;
  let bestLastUsed = Infinity;
  let live = 0;
  let stopping = 0;
  let settling: string | undefined;
  let unreachable: HeldInstance<H> | undefined;
  let starting: string | undefined;
  for (const inc of s.replicas.of(model)) {
    const h = s.held.get(inc);
    if (h === undefined) continue;
    let state = s.core.stateOf(inc);
    if (state === "pending" || state === "freed") {
      settling ??= inc;
      stopping++;
      if (!routeToStopping || state === "freed") continue;
      state = s.core.instance(inc)?.state;
    } else {
      live++;
    }
    if (state !== "ready" || h.phase !== "ready" || h.address === undefined) {
      starting ??= inc;
      continue;
    }
    if (!routableNode(s, h)) {
      unreachable ??= h;
      continue;
    }
    const inFlight = s.core.inFlight(h.address);
    const lastUsed = s.core.lastUsedMs(h.address) ?? -Infinity;
    if (inFlight < bestInFlight || (inFlight === bestInFlight && lastUsed < bestLastUsed)) {
      best = h;
      bestInFlight = inFlight;
      bestLastUsed = lastUsed;
    }
  }
  // Nothing routable: a stop whose local half is already dropped still makes calls wait for its settle (no second copy meanwhile).
  if (best === undefined) settling ??= s.core.settlingOf(model);
  const admitting = s.loadIncarnations.get(model);
  if (admitting !== undefined && !s.held.has(admitting)) live++;
  const unconfirmed = s.unconfirmed.count(model);
  return { best, bestInFlight, live: live + unconfirmed, stopping, settling, unreachable, starting, unconfirmed };
}

/**
 * The replica a call goes to — the same as {@link chooseReplica}'s `best` —
 * from the routing order (replica-routes.ts): the per-call cost does not grow
 * with the replicas of the model. Undefined when none is routable (the caller
 * then asks chooseReplica for the rest of the picture).
 */
export function pickReplica<H extends BackendHandle>(s: LoaderState<H>, model: string): { readonly best: HeldInstance<H>; readonly inFlight: number } | undefined {
  if (isPlanted("route-to-stopping")) {
    const c = chooseReplica(s, model);
    return c.best === undefined ? undefined : { best: c.best, inFlight: c.bestInFlight };
  }
  return s.routes.pick(model, (h) => routableNow(s, h));
}

function routableNow<H extends BackendHandle>(s: LoaderState<H>, h: HeldInstance<H>): boolean {
  return s.core.stateOf(h.incarnation) === "ready" && h.phase === "ready" && h.address !== undefined && routableNode(s, h);
}

/**
 * The replica a call's {@link RouteHint} prefers, among the model's
 * routable replicas (the same test as {@link pickReplica}: never one pending
 * eviction, stopping, freed, starting or on an unreachable node); undefined
 * when there is no choice to make or the hint names none of them.
 * O(replicas of the model): only calls of models routed by a hint pay it.
 */
export function preferredReplica<H extends BackendHandle>(s: LoaderState<H>, model: string, hint: RouteHint, leastLoaded: HeldInstance<H>): HeldInstance<H> | undefined {
  const candidates: RouteCandidate[] = [];
  const byIncarnation = new Map<string, HeldInstance<H>>();
  for (const inc of s.replicas.of(model)) {
    const h = s.held.get(inc);
    if (h === undefined || !routableNow(s, h)) continue;
    candidates.push({ incarnation: inc, inFlight: s.core.inFlight(h.address ?? "") });
    byIncarnation.set(inc, h);
  }
  if (candidates.length < 2) return undefined;
  const id = hint.prefer(candidates, leastLoaded.incarnation);
  return id === undefined ? undefined : byIncarnation.get(id);
}

/**
 * Whether calls may go to `h` as far as its node goes: the node is reachable,
 * or its agent is not but the instance serves through the outage (its
 * backend answers the coordinator's own probe: AgentDirectory.servesDuringOutage).
 */
export function routableNode<H extends BackendHandle>(s: LoaderState<H>, h: HeldInstance<H>): boolean {
  // Planted bug "route-probe-failed": an instance on an unreachable node is routed whatever its probe said.
  return s.o.agents.isReachable?.(h.nodeId) !== false || s.o.agents.servesDuringOutage?.(h.incarnation) === true || (isPlanted("route-probe-failed") && s.o.agents.servesDuringOutage !== undefined);
}
