import type { OccupancyEntry } from "@warden/watchdog";
import type { Loader } from "@warden/loader";
import { BackendState, type InventoryEntry, type OrphanProcess } from "@warden/proto";

/**
 * Instances a node's inventory lists as starting (not ready, not exited, no
 * stop requested) that this coordinator does not know: a load another
 * coordinator began — the previous leader before a takeover, or this one
 * before a restart. Reconciliation adopts only ready instances, so until it
 * is ready such a process would count nowhere, and a load of the other member
 * of its exclusive group, or one past the node's LRU limit or memory, could
 * start beside it. They occupy their node (kind `unconfirmed`: not evictable,
 * nothing to stop yet) until an inventory reports them ready (adopted) or gone.
 * One the journal still lists as unconfirmed is counted there, not twice.
 */
export function startingElsewhere(loader: Loader, inventory: readonly InventoryEntry[] | undefined): OccupancyEntry[] {
  const out: OccupancyEntry[] = [];
  for (const e of inventory ?? []) {
    if (e.state === BackendState.READY || e.state === BackendState.EXITED || e.stopRequested !== undefined) continue;
    if (e.incarnation === "" || loader.knows(e.incarnation) || loader.journalReplicas.has(e.incarnation)) continue;
    const spec = e.model === "" ? undefined : loader.modelSpec(e.model);
    out.push({ kind: "unconfirmed", key: e.incarnation, model: e.model === "" ? undefined : e.model, groups: spec?.groups ?? [], sizeBytes: spec?.sizeBytes ?? 0 });
  }
  return out;
}

/** What a node holds that the loader does not (Loader.setOrphans): its reported orphans, then its loads starting elsewhere. */
export function nodeOccupancy(loader: Loader, orphans: readonly OrphanProcess[], inventory: readonly InventoryEntry[] | undefined): OccupancyEntry[] {
  return [
    ...orphans.map((o) => {
      const spec = o.model === "" ? undefined : loader.modelSpec(o.model);
      return { kind: "orphan" as const, key: `pid:${String(o.pid)}`, model: o.model === "" ? undefined : o.model, groups: spec?.groups ?? [], sizeBytes: Number(o.memoryBytes) };
    }),
    ...startingElsewhere(loader, inventory),
  ];
}
