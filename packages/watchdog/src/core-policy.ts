import type { CoreState } from "./core-state.js";
import { applyPolicyPatch, type PolicyPatch } from "./policy.js";

/**
 * Validates and applies a policy change (INVALID_ARGUMENT naming the field;
 * nothing changes on error) and rebuilds the pin set with it.
 */
export function setPolicy(st: CoreState, patch: PolicyPatch): void {
  st.policy = applyPolicyPatch(st.policy, patch, st.caps);
  st.pinned = new Set(st.policy.pinnedModels);
}

export function groupsOf(st: CoreState, model: string): readonly string[] {
  return st.policy.modelGroups[model] ?? [];
}

/** Writes a model's config (groups, pin) as the loader knows it into the policy tables. */
export function applyModelConfig(st: CoreState, model: string, groups: readonly string[] | undefined, pinned: boolean | undefined): void {
  const patch: { -readonly [K in keyof PolicyPatch]: PolicyPatch[K] } = {};
  if (groups !== undefined) {
    const same = JSON.stringify(st.policy.modelGroups[model] ?? []) === JSON.stringify(groups);
    if (!same) patch.modelGroups = { ...st.policy.modelGroups, [model]: groups };
  }
  if (pinned !== undefined && pinned !== st.pinned.has(model)) {
    patch.pinnedModels = pinned ? [...st.policy.pinnedModels, model] : st.policy.pinnedModels.filter((m) => m !== model);
  }
  if (Object.keys(patch).length > 0) setPolicy(st, patch);
}
