/**
 * The per-node rules for one more replica of a model: anti-affinity
 * (`spread`), the node's `maxReplicasPerModel` and its `memoryBudget`. Pure
 * module functions, evaluated per node on every load.
 */

/** Anti-affinity of a model's replicas (ModelSpec.spread). */
export type SpreadMode = "node" | "gpu" | "any";

/** Absolute bytes, or a percentage (0, 100] of the node's memory (GPU memory, RAM without GPUs). */
export type PlacementMemoryBudget = { readonly t: "bytes"; readonly bytes: number } | { readonly t: "percent"; readonly percent: number };

/** What the replica rules read of a node candidate. */
export interface ReplicaFacts {
  readonly memoryTotalBytes: number;
  /** Replicas of the requested model on the node: its instances in any state (reserved, loading, ready, freed, pending) and its leftovers there. */
  readonly modelReplicas: number;
  /** Of those, ones that end by themselves (pending eviction, freed, leftovers, known only from the journal). @default 0 */
  readonly departingReplicas?: number;
  /** Replicas of one model the node may hold (its effective `maxReplicasPerModel`). */
  readonly maxReplicasPerModel: number;
  /** GPU devices the node reported; 1 when it reports none (RAM: one device). */
  readonly devices: number;
  /**
   * Devices holding a replica of the model. A replica whose GPU is not known
   * (no index assigned, a leftover) counts as one device of its own: the
   * conservative reading, since it may be on any of them.
   */
  readonly devicesWithReplica: number;
  /** Caps what placement may account on the node; absent = the node's whole memory. */
  readonly memoryBudget?: PlacementMemoryBudget;
}

/**
 * Why a node may not take another replica, or undefined when it may. `node`:
 * none where one is; `gpu`: none on a device that holds one; `any`: no
 * constraint here (it is a preference: see `spreadTier`). The node's
 * `maxReplicasPerModel` applies in every mode.
 */
export function replicaExclusion(model: string, spread: SpreadMode, n: ReplicaFacts, explain: boolean): string | undefined {
  if (n.modelReplicas >= n.maxReplicasPerModel) {
    return explain ? `holds ${String(n.modelReplicas)} replica(s) of ${model}, its maxReplicasPerModel is ${String(n.maxReplicasPerModel)}` : "";
  }
  if (n.modelReplicas === 0) return undefined;
  if (spread === "node") return explain ? `already holds a replica of ${model} (spread: node)` : "";
  if (spread === "gpu" && n.devicesWithReplica >= n.devices) {
    return explain ? `every GPU device already holds a replica of ${model} (spread: gpu; ${String(Math.min(n.devicesWithReplica, n.devices))}/${String(n.devices)} devices)` : "";
  }
  return undefined;
}

/**
 * Preference among nodes that may take the replica (lower is better, ahead
 * of the binpack/spread score): 0 no replica of the model on the node, 1 one
 * there but a device without one, 2 every device holds one. So `any` and
 * `gpu` fall back to a node with a replica only when no node without one
 * fits, and to a shared device only when no free device does.
 */
export function spreadTier(n: Pick<ReplicaFacts, "modelReplicas" | "devices" | "devicesWithReplica">): number {
  if (n.modelReplicas === 0) return 0;
  return n.devicesWithReplica < n.devices ? 1 : 2;
}

/** The budget in bytes, or undefined when none applies (none set, or a percentage of memory not reported yet). */
export function budgetBytes(n: Pick<ReplicaFacts, "memoryBudget" | "memoryTotalBytes">): number | undefined {
  const b = n.memoryBudget;
  if (b === undefined) return undefined;
  if (b.t === "bytes") return b.bytes;
  return n.memoryTotalBytes > 0 ? Math.floor((n.memoryTotalBytes * b.percent) / 100) : undefined;
}

/** Memory placement may still account on the node: min(total, budget) − accounted; +∞ when neither is known. */
export function freeBytesOf(totalBytes: number, budget: number | undefined, accountedBytes: number): number {
  const cap = budget === undefined ? totalBytes : totalBytes > 0 ? Math.min(totalBytes, budget) : budget;
  if (budget === undefined && totalBytes <= 0) return Number.POSITIVE_INFINITY;
  return Math.max(0, cap - accountedBytes);
}

/** The budget as an operator wrote it, for reasons. */
export function describeBudget(n: Pick<ReplicaFacts, "memoryBudget" | "memoryTotalBytes">): string {
  const b = n.memoryBudget;
  if (b === undefined) return "";
  const bytes = budgetBytes(n);
  if (b.t === "bytes") return `memory budget ${String(b.bytes)} bytes`;
  return bytes === undefined ? `memory budget ${String(b.percent)}% (not applied: node memory not reported)` : `memory budget ${String(b.percent)}% = ${String(bytes)} bytes`;
}
