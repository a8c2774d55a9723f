import type { NodeLimits } from "@warden/cluster";
import type { ReplicaSettings } from "@warden/loader";
import type { PolicyPatch } from "@warden/watchdog";

// The JSON of each durable-state section as this coordinator writes it, and
// the checks it reads it back with (a value from another version or a
// hand-edited bucket is skipped with a warning, never half applied).

/** "drain", id = node id. */
export interface DrainValue {
  readonly force: boolean;
  readonly sinceWallMs: number;
  /** Who asked for the drain (absent in entries written before it was kept). */
  readonly actor?: string;
}

/** "lost-node", id = node id. `reason` is the operator's text (≤ 1024 characters). */
export interface LostValue {
  readonly reason: string;
  readonly atWallMs: number;
}

/** "forgotten", id = incarnation. */
export interface ForgottenValue {
  readonly nodeId: string;
  readonly operator: string;
  readonly note: string;
  readonly atWallMs: number;
}

/** A model's pin and groups as UpdatePolicy set them. */
export interface ModelPolicyValue {
  readonly pinned: boolean;
  readonly groups: readonly string[];
}

/**
 * "policy", id = "cluster": every UpdatePolicy so far merged into one patch
 * over the config file's policy (scalars: the latest value of each field;
 * models: the latest pin and groups of each model changed), one key so a
 * change is written whole. Bounded by the store's value size (64 KiB).
 */
export interface PolicyValue {
  readonly patch: PolicyPatch;
  readonly models: Readonly<Record<string, ModelPolicyValue>>;
}

export const policyKey = "cluster";

/** "scale", id = model: ScaleModel's min/max with the config's replicas it was made against (the config wins once it changes them). */
export interface ScaleValue {
  readonly min: number;
  readonly max: number;
  readonly configReplicas: ReplicaSettings;
  readonly operator: string;
}

/** "node-limits", id = node id: the operator's override as it is after the change. */
export type NodeLimitsValue = NodeLimits;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0;
const isWallMs = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v >= 0;
const isText = (v: unknown, max: number): v is string => typeof v === "string" && v.length <= max;

export function parseDrain(v: unknown): DrainValue | undefined {
  if (!isRecord(v) || typeof v["force"] !== "boolean" || !isWallMs(v["sinceWallMs"])) return undefined;
  const actor = v["actor"];
  if (actor !== undefined && !isText(actor, 256)) return undefined;
  return { force: v["force"], sinceWallMs: v["sinceWallMs"], ...(actor === undefined ? {} : { actor }) };
}

export function parseLost(v: unknown): LostValue | undefined {
  return isRecord(v) && isText(v["reason"], 1024) && isWallMs(v["atWallMs"]) ? { reason: v["reason"], atWallMs: v["atWallMs"] } : undefined;
}

export function parseForgotten(v: unknown): ForgottenValue | undefined {
  if (!isRecord(v) || !isText(v["nodeId"], 256) || !isText(v["operator"], 256) || !isText(v["note"], 1024) || !isWallMs(v["atWallMs"])) return undefined;
  return { nodeId: v["nodeId"], operator: v["operator"], note: v["note"], atWallMs: v["atWallMs"] };
}

/** Shape only: the values are checked whole by the watchdog's validator before they apply. */
export function parsePolicy(v: unknown): PolicyValue | undefined {
  if (!isRecord(v) || !isRecord(v["patch"]) || !isRecord(v["models"])) return undefined;
  const models: Record<string, ModelPolicyValue> = {};
  for (const [id, m] of Object.entries(v["models"])) {
    if (!isRecord(m) || typeof m["pinned"] !== "boolean" || !Array.isArray(m["groups"]) || !m["groups"].every((g) => typeof g === "string")) return undefined;
    models[id] = { pinned: m["pinned"], groups: m["groups"] };
  }
  return { patch: v["patch"], models };
}

export function parseScale(v: unknown): ScaleValue | undefined {
  if (!isRecord(v) || !isCount(v["min"]) || !isCount(v["max"]) || !isText(v["operator"], 256)) return undefined;
  const c = v["configReplicas"];
  if (!isRecord(c) || !isCount(c["min"]) || !isCount(c["max"]) || !isCount(c["targetInFlight"]) || !isCount(c["scaleDownAfterMs"])) return undefined;
  const configReplicas: ReplicaSettings = { min: c["min"], max: c["max"], targetInFlight: c["targetInFlight"], scaleDownAfterMs: c["scaleDownAfterMs"] };
  return { min: v["min"], max: v["max"], configReplicas, operator: v["operator"] };
}

export function parseNodeLimits(v: unknown): NodeLimitsValue | undefined {
  if (!isRecord(v)) return undefined;
  const out: { maxReplicasPerModel?: number; memoryBudget?: NodeLimits["memoryBudget"] } = {};
  const m = v["maxReplicasPerModel"];
  if (m !== undefined) {
    if (!isCount(m) || m < 1) return undefined;
    out.maxReplicasPerModel = m;
  }
  const b = v["memoryBudget"];
  if (b !== undefined) {
    if (isRecord(b) && b["t"] === "bytes" && isCount(b["bytes"])) out.memoryBudget = { t: "bytes", bytes: b["bytes"] };
    else if (isRecord(b) && b["t"] === "percent" && typeof b["percent"] === "number" && b["percent"] > 0 && b["percent"] <= 100) out.memoryBudget = { t: "percent", percent: b["percent"] };
    else return undefined;
  }
  return out.maxReplicasPerModel === undefined && out.memoryBudget === undefined ? undefined : out;
}
