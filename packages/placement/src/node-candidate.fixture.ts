import type { NodeCandidate } from "./index.js";

export const GiB = 1024 ** 3;

/** A ready, empty 24 GiB node with one device; tests override what they need. */
export function node(init: Partial<NodeCandidate> & { nodeId: string }): NodeCandidate {
  return {
    state: "ready",
    draining: false,
    labels: {},
    memoryTotalBytes: 24 * GiB,
    memoryUsedBytes: 0,
    reservedBytes: 0,
    occupied: 0,
    limit: 0,
    evictableConflicts: [],
    blockingConflicts: [],
    evictableBytes: 0,
    evictableSlots: 0,
    modelReplicas: 0,
    maxReplicasPerModel: 1,
    devices: 1,
    devicesWithReplica: 0,
    ...init,
  };
}
