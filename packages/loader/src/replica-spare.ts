import type { LoaderState } from "./loader-state.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { chooseReplica } from "./replica-routing.js";

/**
 * The replicas a replica load (min floor, scale-up, drain move) of `spec`
 * must not evict to make room (AdmissionRequest.spare): its own model's —
 * one replica for another is no progress — and every replica of a model
 * whose replicas (not being stopped) are at or below its min, which the
 * reconciler would only take back. Simulation seed 788: with one placeable
 * node and two min-2 models, every floor load evicted one of those by LRU,
 * so each load succeeded, no breaker opened, and the node churned for ever.
 * On-demand loads spare nothing (LocalAI's LRU, as before).
 * O(configured models + their replicas); admission attempts only.
 */
export function replicaSpare<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): ReadonlySet<string> {
  const spare = new Set(s.replicas.of(spec.id));
  for (const m of s.models.values()) {
    if (m.id === spec.id || m.replicas.min === 0) continue;
    const held = s.replicas.of(m.id);
    if (held.size === 0 || chooseReplica(s, m.id).live > m.replicas.min) continue;
    for (const inc of held) spare.add(inc);
  }
  return spare;
}
