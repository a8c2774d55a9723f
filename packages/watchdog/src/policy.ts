import { invalidArgument, maxDurationMs, maxIntervalMs, maxLimitPerNode } from "@warden/common";
import type { WatchdogCaps } from "./caps.js";
import { describeValue } from "./describe-value.js";

/**
 * The eviction policy. Every field applies live (DESIGN §3.4 item 6): changing
 * it never loses accounting, and the next selection uses the new value.
 * Defaults are DESIGN §5 (and LocalAI's where DESIGN is silent).
 */
export interface WatchdogPolicy {
  /** Maximum occupied slots per node (DESIGN §3.4 item 3); 0 means unlimited; at most 1024 (`maxLimitPerNode`). @default 0 */
  readonly limitPerNode: number;
  /** Run the idle check on each tick. @default false */
  readonly idleCheck: boolean;
  /** Idle age after which an idle instance is evicted (strictly greater); at most 30 days (`maxDurationMs`). @default 900000 (15 min) */
  readonly idleTimeoutMs: number;
  /** Run the busy check (busy-killer, force path, ignores pins) on each tick. @default false */
  readonly busyCheck: boolean;
  /** Age of the oldest live request after which the busy-killer fires (strictly greater); at most 30 days. @default 300000 (5 min) */
  readonly busyTimeoutMs: number;
  /** Period the caller should tick at. The core does not schedule; it only stores and validates it; at most 1 hour (`maxIntervalMs`). @default 500 */
  readonly tickIntervalMs: number;
  /** Run the memory reclaimer on each tick. @default false */
  readonly memoryReclaimer: boolean;
  /** Pressure turns on when used/total on any device is strictly above this. In (0, 1]. @default 0.95 */
  readonly memoryThreshold: number;
  /** Pressure turns off when every device stays below this for `memoryReleaseHoldMs`. @default 0.90 (threshold − 0.05) */
  readonly memoryReleaseThreshold: number;
  /** How long usage must stay below the release threshold before pressure turns off. @default 30000 */
  readonly memoryReleaseHoldMs: number;
  /** After a reclaimer eviction settles, no further reclaimer eviction on that node until a newer reading or this long. @default 10000 */
  readonly memoryReleaseWaitMs: number;
  /** Let group, limit and memory paths select busy instances, through the force stop. @default false */
  readonly forceEvictionWhenBusy: boolean;
  /** Order candidates by size descending (unknown size last), then last-used ascending. @default false */
  readonly sizeAware: boolean;
  /** Models exempt from idle, limit, group and memory eviction (not from the busy-killer). Replaced wholesale. @default [] */
  readonly pinnedModels: readonly string[];
  /** Concurrency groups per model. Replaced wholesale; models with an empty list are dropped. @default {} */
  readonly modelGroups: Readonly<Record<string, readonly string[]>>;
}

/** A partial update; fields left out keep their value. Validated as a whole before anything changes. */
export type PolicyPatch = Partial<WatchdogPolicy>;

/** DESIGN §5 defaults. */
export const defaultPolicy: WatchdogPolicy = Object.freeze({
  limitPerNode: 0,
  idleCheck: false,
  idleTimeoutMs: 15 * 60_000,
  busyCheck: false,
  busyTimeoutMs: 5 * 60_000,
  tickIntervalMs: 500,
  memoryReclaimer: false,
  memoryThreshold: 0.95,
  memoryReleaseThreshold: 0.9,
  memoryReleaseHoldMs: 30_000,
  memoryReleaseWaitMs: 10_000,
  forceEvictionWhenBusy: false,
  sizeAware: false,
  pinnedModels: Object.freeze([]),
  modelGroups: Object.freeze({}) as Readonly<Record<string, readonly string[]>>,
});

function integerAtMost(field: string, value: unknown, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > max) {
    throw invalidArgument(field, `must be an integer in [0, ${max}], got ${describeValue(value)}`);
  }
  return value;
}

function positiveDurationMs(field: string, value: unknown, maxMs: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > maxMs) {
    throw invalidArgument(field, `must be a duration in (0, ${maxMs}] ms, got ${describeValue(value)}`);
  }
  return value;
}

function nonNegativeDurationMs(field: string, value: unknown, maxMs: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0 || value > maxMs) {
    throw invalidArgument(field, `must be a duration in [0, ${maxMs}] ms, got ${describeValue(value)}`);
  }
  return value;
}

function ratio(field: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > 1) {
    throw invalidArgument(field, `must be in (0, 1], got ${describeValue(value)}`);
  }
  return value;
}

function flag(field: string, value: unknown): boolean {
  if (typeof value !== "boolean") throw invalidArgument(field, `must be a boolean, got ${describeValue(value)}`);
  return value;
}

function name(field: string, value: unknown, maxLength: number): string {
  if (typeof value !== "string" || value.length === 0 || value.length > maxLength) {
    throw invalidArgument(field, `must be a non-empty string of at most ${maxLength} characters`);
  }
  return value;
}

/**
 * Validates `patch` against `current` and returns the new policy, or throws a
 * WardenError INVALID_ARGUMENT whose message and `details.field` name the
 * first offending field. Nothing is applied on error.
 *
 * When only `memoryThreshold` changes, the release threshold follows it at
 * threshold − 0.05 (DESIGN §3.4 item 7), so the pair stays ordered.
 */
export function applyPolicyPatch(current: WatchdogPolicy, patch: PolicyPatch, caps: WatchdogCaps): WatchdogPolicy {
  // Caller input may come straight from an admin request: check types at run time too.
  const p = patch as Record<string, unknown>;
  const known = new Set(Object.keys(defaultPolicy));
  for (const key of Object.keys(p)) {
    if (!known.has(key)) throw invalidArgument(key, "unknown policy field");
  }
  const next: { -readonly [K in keyof WatchdogPolicy]: WatchdogPolicy[K] } = { ...current };
  if (p.limitPerNode !== undefined) next.limitPerNode = integerAtMost("limitPerNode", p.limitPerNode, maxLimitPerNode);
  if (p.idleCheck !== undefined) next.idleCheck = flag("idleCheck", p.idleCheck);
  if (p.idleTimeoutMs !== undefined) next.idleTimeoutMs = positiveDurationMs("idleTimeoutMs", p.idleTimeoutMs, maxDurationMs);
  if (p.busyCheck !== undefined) next.busyCheck = flag("busyCheck", p.busyCheck);
  if (p.busyTimeoutMs !== undefined) next.busyTimeoutMs = positiveDurationMs("busyTimeoutMs", p.busyTimeoutMs, maxDurationMs);
  if (p.tickIntervalMs !== undefined) next.tickIntervalMs = positiveDurationMs("tickIntervalMs", p.tickIntervalMs, maxIntervalMs);
  if (p.memoryReclaimer !== undefined) next.memoryReclaimer = flag("memoryReclaimer", p.memoryReclaimer);
  if (p.memoryThreshold !== undefined) {
    next.memoryThreshold = ratio("memoryThreshold", p.memoryThreshold);
    if (p.memoryReleaseThreshold === undefined) next.memoryReleaseThreshold = Math.max(0, next.memoryThreshold - 0.05);
  }
  if (p.memoryReleaseThreshold !== undefined) {
    const v = p.memoryReleaseThreshold;
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || v >= next.memoryThreshold) {
      throw invalidArgument("memoryReleaseThreshold", `must be in [0, memoryThreshold=${next.memoryThreshold}), got ${describeValue(v)}`);
    }
    next.memoryReleaseThreshold = v;
  }
  if (p.memoryReleaseHoldMs !== undefined) next.memoryReleaseHoldMs = nonNegativeDurationMs("memoryReleaseHoldMs", p.memoryReleaseHoldMs, maxDurationMs);
  if (p.memoryReleaseWaitMs !== undefined) next.memoryReleaseWaitMs = nonNegativeDurationMs("memoryReleaseWaitMs", p.memoryReleaseWaitMs, maxDurationMs);
  if (p.forceEvictionWhenBusy !== undefined) next.forceEvictionWhenBusy = flag("forceEvictionWhenBusy", p.forceEvictionWhenBusy);
  if (p.sizeAware !== undefined) next.sizeAware = flag("sizeAware", p.sizeAware);
  if (p.pinnedModels !== undefined) {
    const list = p.pinnedModels;
    if (!Array.isArray(list)) throw invalidArgument("pinnedModels", "must be a list of model ids");
    if (list.length > caps.maxModels) throw invalidArgument("pinnedModels", `at most ${caps.maxModels} models`);
    next.pinnedModels = Object.freeze([...new Set(list.map((m: unknown, i) => name(`pinnedModels[${i}]`, m, caps.maxNameLength)))]);
  }
  if (p.modelGroups !== undefined) {
    const table = p.modelGroups;
    if (typeof table !== "object" || table === null || Array.isArray(table)) throw invalidArgument("modelGroups", "must be an object of model id to group list");
    const entries = Object.entries(table as Record<string, unknown>);
    if (entries.length > caps.maxModels) throw invalidArgument("modelGroups", `at most ${caps.maxModels} models`);
    const copy: Record<string, readonly string[]> = {};
    for (const [model, groups] of entries) {
      name("modelGroups", model, caps.maxNameLength);
      const field = `modelGroups.${model}`;
      if (!Array.isArray(groups)) throw invalidArgument(field, "must be a list of group names");
      if (groups.length > caps.maxGroupsPerModel) throw invalidArgument(field, `at most ${caps.maxGroupsPerModel} groups`);
      const clean = [...new Set(groups.map((g: unknown, i) => name(`${field}[${i}]`, g, caps.maxNameLength)))];
      // LocalAI drops models with an empty list; a deep copy so the caller cannot mutate us.
      if (clean.length > 0) copy[model] = Object.freeze(clean);
    }
    next.modelGroups = Object.freeze(copy);
  }
  return Object.freeze(next);
}

/** A deep, mutable-safe copy for callers (GetPolicy). */
export function copyPolicy(policy: WatchdogPolicy): WatchdogPolicy {
  const groups: Record<string, readonly string[]> = {};
  for (const [m, g] of Object.entries(policy.modelGroups)) groups[m] = [...g];
  return { ...policy, pinnedModels: [...policy.pinnedModels], modelGroups: groups };
}
