import type { LoaderState } from "./loader-state.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";

/**
 * The model's groups and pin as configured now. Admission and registration
 * apply them to the watchdog's policy (applyModelConfig), and a load may
 * outlive a config reload (admission retries, a slow start): its own copy of
 * the spec would set the old pin again — seed 28: a reload unpinned m5, a
 * replica load started before it pinned m5 again at its admission, and the
 * stale pin let m2 past the per-node limit by the pins-only rule.
 */
export function pinsAndGroupsNow<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): { readonly groups: readonly string[]; readonly pinned: boolean } {
  const now = s.models.get(spec.id) ?? spec;
  return { groups: now.groups, pinned: now.pinned };
}
