import type { ReplicaLoad } from "./load-path.js";
import type { LoaderState } from "./loader-state.js";
import { isStale } from "./load-digest.js";
import { loadRevision, type ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";

/**
 * Whether a replica load in admission is not needed any more, asked before
 * admission and before every placement attempt. `live` counts this load (in
 * admission): enough replicas without it. A floor or scale-up load also
 * counts the replicas being stopped toward `max`, as the reconciler and
 * maybeScaleUp do before starting it: a failed stop registers one again
 * (seed 245: an m4 adopted during a min load's admission and put pending
 * eviction at once; the load went on and made 2 held replicas, max 1). A
 * drain's replacement keeps its own bound: it runs beside the replica it
 * moves, and drain-plan counted the stopping ones before starting it; so does
 * a rollout's replacement (beside the stale replica it replaces).
 * `spec` is the model as configured now (a ScaleModel or reload may have
 * lowered max while the load waited).
 */
export function replicaNotNeeded(c: { readonly live: number; readonly stopping: number }, spec: ModelSpec, replica: ReplicaLoad, rolloutWanted = true): boolean {
  if (c.live - 1 >= replica.upTo || (replica.cause === "rollout" && !rolloutWanted)) return true;
  return replica.cause !== "drain" && replica.cause !== "rollout" && c.live - 1 + c.stopping >= spec.replicas.max;
}

/**
 * Whether a rollout's replacement (loading `loadSpec`) is still wanted: the
 * config still says `loadSpec`'s load settings, and a held replica of the
 * model runs with others. A reload that reverted the change, or replaced it
 * with a third one, while the replacement waited in admission ends it (the
 * next pass starts the right one); without this it would land one above max
 * beside replicas that are current again (simulation seed 2, long profile).
 * O(the model's replicas).
 */
export function rolloutWanted<H extends BackendHandle>(s: Pick<LoaderState<H>, "models" | "replicas" | "held"> & { readonly o?: { readonly agents: Pick<LoaderState<H>["o"]["agents"], "bundleStale"> } }, loadSpec: ModelSpec): boolean {
  const current = s.models.get(loadSpec.id);
  if (current === undefined || loadRevision(current) !== loadRevision(loadSpec)) return false;
  for (const inc of s.replicas.of(loadSpec.id)) {
    const h = s.held.get(inc);
    if (h !== undefined && isStale(h, current, s.o?.agents)) return true;
  }
  return false;
}
