import {
  durationMsFromUint64,
  invalidArgument,
  maxDurationMs,
  maxGroupNameLength,
  maxGroupsPerModel,
  maxLimitPerNode,
  maxModels,
} from "@warden/common";
import type { Loader } from "@warden/loader";
import type { UpdatePolicyRequest } from "@warden/proto";
import type { PolicyPatch } from "@warden/watchdog";
import { checkId } from "./check-id.js";

type MutablePolicyPatch = { -readonly [K in keyof PolicyPatch]: PolicyPatch[K] };
export interface ModelPolicyChange {
  readonly model: string;
  readonly pinned: boolean;
  readonly groups: readonly string[];
}

/**
 * Checks every field of an UpdatePolicy patch against its documented maximum
 * (limits.ts) and converts it, naming the API field on error; nothing is
 * applied here. uint64 fields are range-checked as bigints before becoming
 * numbers (2^64-1 would otherwise round to 2^64 and no longer encode).
 */
export function policyPatchOf(p: NonNullable<UpdatePolicyRequest["patch"]>, loader: Pick<Loader, "modelSpec">): { patch: PolicyPatch; models: ModelPolicyChange[] } {
  const patch: MutablePolicyPatch = {};
  if (p.limitPerNode !== undefined) {
    if (p.limitPerNode > maxLimitPerNode) throw invalidArgument("patch.limit_per_node", `must be in [0, ${String(maxLimitPerNode)}] (0 = unlimited), got ${String(p.limitPerNode)}`);
    patch.limitPerNode = p.limitPerNode;
  }
  if (p.idleCheck !== undefined) patch.idleCheck = p.idleCheck;
  if (p.idleTimeoutMs !== undefined) patch.idleTimeoutMs = durationMsFromUint64(p.idleTimeoutMs, "patch.idle_timeout_ms", maxDurationMs, 1);
  if (p.busyCheck !== undefined) patch.busyCheck = p.busyCheck;
  if (p.busyTimeoutMs !== undefined) patch.busyTimeoutMs = durationMsFromUint64(p.busyTimeoutMs, "patch.busy_timeout_ms", maxDurationMs, 1);
  if (p.memoryReclaimer !== undefined) patch.memoryReclaimer = p.memoryReclaimer;
  if (p.memoryThreshold !== undefined) {
    if (!(p.memoryThreshold > 0 && p.memoryThreshold <= 1)) throw invalidArgument("patch.memory_threshold", `must be in (0, 1], got ${String(p.memoryThreshold)}`);
    patch.memoryThreshold = p.memoryThreshold;
    patch.memoryReleaseThreshold = Math.max(0.01, p.memoryThreshold - 0.05);
  }
  if (p.forceEvictionWhenBusy !== undefined) patch.forceEvictionWhenBusy = p.forceEvictionWhenBusy;
  if (p.sizeAware !== undefined) patch.sizeAware = p.sizeAware;
  if (p.models.length > maxModels) throw invalidArgument("patch.models", `at most ${String(maxModels)} models, got ${String(p.models.length)}`);
  const seen = new Set<string>();
  const models = p.models.map((m, i): ModelPolicyChange => {
    const field = `patch.models[${String(i)}]`;
    checkId(m.model, `${field}.model`);
    if (loader.modelSpec(m.model) === undefined) throw invalidArgument(`${field}.model`, `"${m.model}" is not configured`);
    if (seen.has(m.model)) throw invalidArgument(`${field}.model`, `"${m.model}" appears twice`);
    seen.add(m.model);
    if (m.groups.length > maxGroupsPerModel) throw invalidArgument(`${field}.groups`, `at most ${String(maxGroupsPerModel)} groups, got ${String(m.groups.length)}`);
    m.groups.forEach((g, j) => {
      if (g === "" || g.length > maxGroupNameLength) throw invalidArgument(`${field}.groups[${String(j)}]`, `must be 1..${String(maxGroupNameLength)} characters`);
    });
    return { model: m.model, pinned: m.pinned, groups: [...m.groups] };
  });
  return { patch, models };
}

/** The pin and group tables the model table would give after `changes` (as Loader.patchModel builds them). */
export function modelTables(loader: Pick<Loader, "modelSpecs">, changes: readonly ModelPolicyChange[]): Pick<PolicyPatch, "pinnedModels" | "modelGroups"> {
  const byId = new Map(changes.map((c) => [c.model, c]));
  const pinnedModels: string[] = [];
  const modelGroups: Record<string, readonly string[]> = {};
  for (const m of loader.modelSpecs()) {
    const c = byId.get(m.id);
    const groups = c?.groups ?? m.groups;
    if (c?.pinned ?? m.pinned) pinnedModels.push(m.id);
    if (groups.length > 0) modelGroups[m.id] = groups;
  }
  return { pinnedModels, modelGroups };
}


/**
 * One line per field an UpdatePolicy set, with its value, for the audit
 * event (policy.updated) and the reload log: `idleTimeoutMs=30000`,
 * `models.m pinned=true groups=[a]`. Bounded by the patch (a dozen fields)
 * and the model table (maxModels).
 */
export function policyChanges(p: { readonly patch: PolicyPatch; readonly models: Readonly<Record<string, { readonly pinned: boolean; readonly groups: readonly string[] }>> }): string[] {
  const out: string[] = [];
  for (const [field, value] of Object.entries(p.patch) as [string, unknown][]) {
    // The release threshold follows memoryThreshold (policyPatchOf): not a field of its own.
    if (field === "memoryReleaseThreshold" || value === undefined) continue;
    out.push(`${field}=${JSON.stringify(value)}`);
  }
  for (const [model, m] of Object.entries(p.models)) out.push(`models.${model} pinned=${String(m.pinned)} groups=[${m.groups.join(",")}]`);
  return out;
}
