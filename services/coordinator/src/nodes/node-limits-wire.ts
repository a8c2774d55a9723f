import type { MessageInitShape } from "@bufbuild/protobuf";
import { invalidArgument } from "@warden/common";
import { defaultMaxReplicasPerModel, type NodeLimits } from "@warden/cluster";
import type { NodeLimits as NodeLimitsMessage, NodeLimitsSchema } from "@warden/proto";
import { replicaBounds } from "@warden/loader";

/**
 * Bounds of a node's placement limits from outside (Register from an agent,
 * SetNodeLimits from an operator): both are hostile input, checked whole.
 */
export const nodeLimitBounds = Object.freeze({
  maxReplicasPerModel: replicaBounds.maxReplicas,
  /** Exact sums: the same cap as every other byte count a node reports. */
  maxBudgetBytes: Number.MAX_SAFE_INTEGER,
  maxBudgetPercent: 100,
});

/**
 * A NodeLimits message as @warden/cluster's NodeLimits, or INVALID_ARGUMENT
 * naming the field (`${field}.max_replicas_per_model`, ...). Unset → {}.
 */
export function nodeLimitsFromWire(m: NodeLimitsMessage | undefined, field: string): NodeLimits {
  if (m === undefined) return {};
  const B = nodeLimitBounds;
  const out: { maxReplicasPerModel?: number; memoryBudget?: NodeLimits["memoryBudget"] } = {};
  if (m.maxReplicasPerModel !== undefined) {
    const n = m.maxReplicasPerModel;
    if (!Number.isInteger(n) || n < 1 || n > B.maxReplicasPerModel) throw invalidArgument(`${field}.max_replicas_per_model`, `must be in 1..${String(B.maxReplicasPerModel)}, got ${String(n)}`);
    out.maxReplicasPerModel = n;
  }
  const b = m.memoryBudget;
  if (b.case === "memoryBudgetBytes") {
    if (b.value < 1n || b.value > BigInt(B.maxBudgetBytes)) throw invalidArgument(`${field}.memory_budget_bytes`, `must be in 1..${String(B.maxBudgetBytes)} bytes, got ${String(b.value)}`);
    out.memoryBudget = { t: "bytes", bytes: Number(b.value) };
  } else if (b.case === "memoryBudgetPercent") {
    // NaN fails both comparisons' negation: refused with the rest.
    if (!(b.value > 0 && b.value <= B.maxBudgetPercent)) throw invalidArgument(`${field}.memory_budget_percent`, `must be in (0, ${String(B.maxBudgetPercent)}], got ${String(b.value)}`);
    out.memoryBudget = { t: "percent", percent: b.value };
  }
  return out;
}

type NodeLimitsInit = MessageInitShape<typeof NodeLimitsSchema>;

/** NodeLimits as the API shows it; `withDefaults` fills the default replicas per model (effective limits). */
export function nodeLimitsToWire(l: NodeLimits, withDefaults = false): NodeLimitsInit {
  const max = l.maxReplicasPerModel ?? (withDefaults ? defaultMaxReplicasPerModel : undefined);
  const b = l.memoryBudget;
  return {
    ...(max === undefined ? {} : { maxReplicasPerModel: max }),
    ...(b === undefined ? {} : { memoryBudget: b.t === "bytes" ? { case: "memoryBudgetBytes", value: BigInt(b.bytes) } : { case: "memoryBudgetPercent", value: b.percent } }),
  };
}
