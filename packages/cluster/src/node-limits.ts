/**
 * Per-node placement limits: from the agent's config (sent with
 * Register) and an Admin override (journaled by the coordinator, so it
 * survives agent and coordinator restarts). The override wins field by field.
 */
export interface NodeLimits {
  /** Replicas of one model this node may hold; undefined = the default (1). */
  readonly maxReplicasPerModel?: number;
  /** Caps what placement may account on the node; undefined = the node's whole memory. */
  readonly memoryBudget?: MemoryBudget;
}

/** Absolute bytes, or a percentage (0, 100] of the node's GPU memory (RAM without GPUs). */
export type MemoryBudget = { readonly t: "bytes"; readonly bytes: number } | { readonly t: "percent"; readonly percent: number };

export const defaultMaxReplicasPerModel = 1;
