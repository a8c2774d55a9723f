import type { LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { chooseReplica } from "./replica-routing.js";

/**
 * What serves an on-demand load's callers instead of it: a routable replica
 * adopted meanwhile, or — as ensureLoaded answers a call arriving now — one
 * on an unreachable node when the replicas, this load aside, fill max (seed
 * 2878: m2, max 1, adopted on n3; a stall made n3 unreachable before the
 * load's next attempt, which then started a second copy on n0).
 */
export function servedMeanwhile<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): HeldInstance<H> | undefined {
  const c = chooseReplica(s, spec.id);
  if (c.best !== undefined) return c.best;
  // `live` counts this load (in admission).
  return c.unreachable !== undefined && c.live - 1 >= Math.max(1, spec.replicas.max) ? c.unreachable : undefined;
}
