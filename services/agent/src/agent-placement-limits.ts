import type { MessageInitShape } from "@bufbuild/protobuf";
import { invalidArgument, parseMemoryBudget, type MemoryBudgetSetting } from "@warden/common";
import type { NodeLimitsSchema } from "@warden/proto";

/**
 * This node's placement limits, sent in Register: the coordinator
 * holds at most `maxReplicasPerModel` replicas of one model here and accounts
 * at most `memoryBudget` of its memory. An Admin SetNodeLimits override wins.
 */
export interface AgentPlacementLimits {
  /** 1..1024; undefined = the coordinator's default (1). */
  readonly maxReplicasPerModel?: number;
  /** Bytes (1..2^53−1) or a percentage (0, 100] of the GPU memory (RAM without GPUs); undefined = all of it. */
  readonly memoryBudget?: MemoryBudgetSetting;
}

/** The coordinator's bound (node-limits-wire.ts): the same as a model's replicas. */
export const maxReplicasPerModelBound = 1024;

/** `maxReplicasPerModel` (an integer 1..1024). */
export function parseMaxReplicasPerModel(v: unknown, field: string): number | undefined {
  if (v === undefined) return undefined;
  const n = typeof v === "string" && /^\d{1,5}$/.test(v) ? Number(v) : v;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 1 || n > maxReplicasPerModelBound) throw invalidArgument(field, `must be an integer in 1..${String(maxReplicasPerModelBound)}, got ${JSON.stringify(v)}`);
  return n;
}

/** The config's top-level `maxReplicasPerModel` and `memoryBudget`. */
export function parsePlacementLimits(input: Readonly<Record<string, unknown>>): AgentPlacementLimits {
  const maxReplicasPerModel = parseMaxReplicasPerModel(input["maxReplicasPerModel"], "maxReplicasPerModel");
  const memoryBudget = parseMemoryBudget(input["memoryBudget"], "memoryBudget");
  return { ...(maxReplicasPerModel === undefined ? {} : { maxReplicasPerModel }), ...(memoryBudget === undefined ? {} : { memoryBudget }) };
}

/** RegisterRequest.limits. */
export function placementLimitsMessage(l: AgentPlacementLimits): MessageInitShape<typeof NodeLimitsSchema> {
  const b = l.memoryBudget;
  return {
    ...(l.maxReplicasPerModel === undefined ? {} : { maxReplicasPerModel: l.maxReplicasPerModel }),
    ...(b === undefined ? {} : { memoryBudget: b.t === "bytes" ? { case: "memoryBudgetBytes", value: BigInt(b.bytes) } : { case: "memoryBudgetPercent", value: b.percent } }),
  };
}
