import type { CoreState } from "./core-state.js";
import { checkModelRules, type ModelRule } from "./model-rules.js";
import { applyPolicyPatch, type PolicyPatch } from "./policy.js";

/**
 * Validates and applies a policy change (INVALID_ARGUMENT naming the field;
 * nothing changes on error) and rebuilds the pin set with it.
 */
export function setPolicy(st: CoreState, patch: PolicyPatch): void {
  const before = st.policy;
  const pinnedBefore = st.pinned;
  st.policy = applyPolicyPatch(st.policy, patch, st.caps);
  st.pinned = new Set(st.policy.pinnedModels);
  const p = st.policy;
  // A reading is judged against the threshold when it arrives; a new threshold must be applied to every node's last one.
  if (p.memoryThreshold !== before.memoryThreshold) for (const n of st.nodes.values()) if (n.memory !== undefined) st.memoryWatch.add(n);
  // The tick's timers: a timing change re-times every address, a pin change its model's.
  if (p.idleCheck !== before.idleCheck || p.idleTimeoutMs !== before.idleTimeoutMs || p.busyCheck !== before.busyCheck || p.busyTimeoutMs !== before.busyTimeoutMs) {
    st.schedule.markAllDirty();
    return;
  }
  for (const m of pinnedBefore) if (!st.pinned.has(m)) markModelDirty(st, m);
  for (const m of st.pinned) if (!pinnedBefore.has(m)) markModelDirty(st, m);
}

/** Replaces the per-model idle rules as a whole (checked first); only the models whose rule changed are re-timed. */
export function setModelRules(st: CoreState, rules: ReadonlyMap<string, ModelRule>): void {
  const before = st.modelRules;
  const next = checkModelRules(rules);
  st.modelRules = next;
  for (const [m, r] of before) {
    const n = next.get(m);
    if (n?.minReplicas !== r.minReplicas || n.idleTimeoutMs !== r.idleTimeoutMs) markModelDirty(st, m);
  }
  for (const m of next.keys()) if (!before.has(m)) markModelDirty(st, m);
}

/** Re-times the addresses of every instance of `model` at the next tick. O(instances of the model). */
export function markModelDirty(st: CoreState, model: string): void {
  for (const r of st.byModel.get(model) ?? []) if (r.address !== undefined) st.schedule.markDirty(r.address);
}

/** Shared by every model without groups: `groupsOf` runs per instance on placement's path and allocates nothing. */
const noGroups: readonly string[] = Object.freeze([]);

export function groupsOf(st: CoreState, model: string): readonly string[] {
  return st.policy.modelGroups[model] ?? noGroups;
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
