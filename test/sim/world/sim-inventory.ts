import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { BackendState, GpuInfoSchema, InventoryEntrySchema, NodeResourcesSchema, OrphanProcessSchema, StopRequestedSchema, type InventoryEntry, type NodeResources, type OrphanProcess } from "@warden/proto";
import type { TruthProcess } from "./ground-truth.js";
import type { AgentRecord } from "./sim-agent-types.js";
import { orphanModel } from "../../../services/agent/src/orphan-scan.js";

// The messages of a simulated agent's heartbeat, built from its records and the
// ground truth; the heartbeat (sim-agent.ts) keeps the sequence and the flap.

/** Default messages, made once; heartbeats spread them (fields are replaced, never mutated). */
const templates = {
  entry: create(InventoryEntrySchema),
  stopRequested: create(StopRequestedSchema),
  orphan: create(OrphanProcessSchema),
  resources: create(NodeResourcesSchema),
  gpu: create(GpuInfoSchema),
};

/** One inventory entry per record, in the records' order. */
export function inventoryEntries(records: Iterable<AgentRecord>): InventoryEntry[] {
  const backends: InventoryEntry[] = [];
  for (const r of records) {
    const state = r.state === "exited" ? BackendState.EXITED : r.state === "ready" ? BackendState.READY : r.state === "stopping" ? BackendState.STOPPING : BackendState.LOADING;
    // Spread over a default message instead of `create` per entry: the same
    // message, without reflection on the simulation's hottest path.
    backends.push({
      ...templates.entry,
      incarnation: r.incarnation,
      model: r.model,
      address: r.process.address,
      pid: r.process.pid,
      state,
      memoryBytes: BigInt(r.process.memoryBytes),
      gpuDevice: "0",
      backend: r.backend,
      loadDigest: r.loadDigest,
      ...(r.stopRequested === undefined ? {} : { stopRequested: { ...templates.stopRequested, incarnation: r.incarnation, reason: r.stopRequested.reason, at: timestampFromMs(r.stopRequested.atMs) } }),
    });
  }
  return backends;
}

/**
 * The node's live processes without a record (its orphans), and the memory all live processes use.
 * The simulated agent has no partial records: it finds every orphan by its mark, whose model is the
 * one the process was started for (the real agent's `orphanModel`, with its planted bug).
 */
export function orphansAndUsedBytes(live: Iterable<TruthProcess>, hasRecord: (incarnation: string) => boolean): { readonly orphans: OrphanProcess[]; readonly used: number } {
  const orphans: OrphanProcess[] = [];
  let used = 0;
  for (const p of live) {
    used += p.memoryBytes;
    if (!hasRecord(p.incarnation)) orphans.push({ ...templates.orphan, pid: p.pid, address: p.address, memoryBytes: BigInt(p.memoryBytes), model: orphanModel(undefined, p.model), detail: "record missing" });
  }
  return { orphans, used };
}

/** The node's one simulated GPU, `used` capped at its total. */
export function gpuResources(memoryTotalBytes: number, used: number): NodeResources {
  return {
    ...templates.resources,
    gpus: [{ ...templates.gpu, index: 0, name: "sim", totalBytes: BigInt(memoryTotalBytes), usedBytes: BigInt(Math.min(used, memoryTotalBytes)) }],
  };
}
