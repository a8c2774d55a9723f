import type { ReplicaLoad } from "./load-path.js";
import type { ModelSpec } from "./model-spec.js";

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
export function replicaNotNeeded(c: { readonly live: number; readonly stopping: number }, spec: ModelSpec, replica: ReplicaLoad): boolean {
  if (c.live - 1 >= replica.upTo) return true;
  return replica.cause !== "drain" && replica.cause !== "rollout" && c.live - 1 + c.stopping >= spec.replicas.max;
}
