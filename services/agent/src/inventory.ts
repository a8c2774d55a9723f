import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { NodeResourcesSchema } from "@warden/proto";
import type { AgentContext } from "./agent-context.js";
import type { MemoryReading } from "./memory-probe.js";
import { foreignOf, inventoryEntryOf, orphanOf, type ForeignInit, type InventoryEntryInit, type OrphanInit } from "./proto-views.js";

/** The agent's inventory at one moment. */
export interface InventorySnapshot {
  backends: InventoryEntryInit[];
  orphans: OrphanInit[];
  /** Listeners in the port range this agent did not start (last scan): never signalled. */
  foreign: ForeignInit[];
  bootEpochMs: number;
  /** The newest leader epoch this agent has seen (0 = none), so a superseded coordinator can tell. */
  leaderEpoch: bigint;
}

export type NodeResourcesInit = MessageInitShape<typeof NodeResourcesSchema>;

const measure = async (ctx: AgentContext, pids: number[], signal?: AbortSignal): Promise<MemoryReading> => ctx.probe(pids, signal);

/** The table (exited entries shown once), the last scan's orphans and foreign processes, and their memory. */
export async function takeInventory(ctx: AgentContext, bootEpochMs: number, signal?: AbortSignal): Promise<InventorySnapshot> {
  // Snapshot synchronously; exited entries are shown once, then dropped.
  const procs = ctx.table.takeInventory();
  // Starts whose process the table does not hold yet, in the same turn (pending-spawns.ts).
  const pending = ctx.pendingSpawns.entries();
  const orphanList = ctx.scan.orphans();
  const live = procs.filter((p) => p.state().t !== "exited").map((p) => p.pid);
  const mem = await measure(ctx, [...live, ...orphanList.map((o) => o.pid)], signal);
  for (const p of procs) if (p.state().t !== "exited") void p.logs.enforceCap();
  return {
    backends: [...procs.map((p) => inventoryEntryOf(p, p.state().t === "exited" ? 0 : (mem.perPidBytes.get(p.pid) ?? 0))), ...pending],
    orphans: orphanList.map((o) => orphanOf(o, mem.perPidBytes.get(o.pid) ?? 0)),
    foreign: ctx.scan.foreign().map(foreignOf),
    bootEpochMs,
    leaderEpoch: ctx.fence.newestSeen(),
  };
}

/** The node's GPUs and RAM, measured now. */
export async function measureNodeResources(ctx: AgentContext, signal?: AbortSignal): Promise<NodeResourcesInit> {
  const mem = await measure(ctx, [], signal);
  return {
    gpus: mem.gpus.map((g) => ({ index: g.index, name: g.name, totalBytes: BigInt(g.totalBytes), usedBytes: BigInt(g.usedBytes) })),
    ramTotalBytes: BigInt(mem.ram.totalBytes),
    ramUsedBytes: BigInt(mem.ram.usedBytes),
    measuredAt: timestampFromMs(ctx.clock.wallNow()),
  };
}
