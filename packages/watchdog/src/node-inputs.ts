/**
 * What the core counts on a node besides its own instances: leftovers and
 * orphans (reconciler, inventories) and memory readings (heartbeats).
 */
import { invalidArgument } from "@warden/common";
import type { CoreState } from "./core-state.js";
import { checkName, checkSize } from "./input-checks.js";
import type { OccupancyEntry } from "./instance.js";
import { dropNodeIfEmpty, nodeFor } from "./instance-index.js";
import { NodeMemory, type MemoryReading, type PressureChange } from "./memory-pressure.js";

/** Replaces the node's leftovers, orphans and unconfirmed instances, validated whole first. */
export function setNodeOccupancy(st: CoreState, nodeId: string, entries: readonly OccupancyEntry[]): void {
  checkName("nodeId", nodeId, st.caps.maxNameLength);
  if (entries.length > st.caps.maxOccupancyPerNode) throw invalidArgument("entries", `at most ${st.caps.maxOccupancyPerNode} per node`);
  const copy = entries.map((e, i) => {
    const kind: unknown = e.kind;
    if (kind !== "leftover" && kind !== "orphan" && kind !== "unconfirmed") throw invalidArgument(`entries[${i}].kind`, "must be leftover, orphan or unconfirmed");
    if (e.groups.length > st.caps.maxGroupsPerModel) throw invalidArgument(`entries[${i}].groups`, `at most ${st.caps.maxGroupsPerModel}`);
    return Object.freeze({ kind: e.kind, key: e.key, model: e.model, groups: Object.freeze([...e.groups]), sizeBytes: checkSize(e.sizeBytes) });
  });
  const n = copy.length === 0 ? st.nodes.get(nodeId) : nodeFor(st, nodeId);
  if (n === undefined) return;
  n.occupancy = copy;
  dropNodeIfEmpty(st, n);
}

/** Records a memory reading for a node. Returns pressure transitions. */
export function reportMemory(st: CoreState, nodeId: string, reading: MemoryReading): PressureChange[] {
  checkName("nodeId", nodeId, st.caps.maxNameLength);
  const n = nodeFor(st, nodeId);
  n.memory ??= new NodeMemory(nodeId);
  const changes = n.memory.report(reading, st.clock.now(), st.policy, st.caps.maxDevicesPerNode);
  if (n.memory.hasPressure()) st.memoryWatch.add(n);
  return changes;
}

/** Forgets a node's occupancy and memory input. Instances must be removed separately. */
export function forgetNode(st: CoreState, nodeId: string): void {
  const n = st.nodes.get(nodeId);
  if (n === undefined) return;
  n.occupancy = [];
  n.memory = undefined;
  dropNodeIfEmpty(st, n);
}
