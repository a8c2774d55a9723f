import type { Occupancy } from "./decision.js";
import type { InstanceView, OccupancyEntry } from "./instance.js";
import type { MemoryDevice } from "./memory-pressure.js";
import type { WatchdogPolicy } from "./policy.js";
import type { AddressRequestView } from "./request-tracker.js";

/** One node's accounting. */
export interface NodeView {
  readonly nodeId: string;
  readonly occupancy: Occupancy;
  readonly occupancyEntries: readonly OccupancyEntry[];
  readonly memory: readonly { readonly device: MemoryDevice; readonly ratio: number; readonly pressure: boolean }[];
  readonly reclaimInFlight: string | undefined;
}

/** Everything the watchdog holds, taken in one synchronous call. */
export interface WatchdogSnapshot {
  readonly atMs: number;
  readonly policy: WatchdogPolicy;
  /** Registered (loading, ready, freed) instances, pending excluded. */
  readonly loadedCount: number;
  /** Every instance: reserved, loading, ready, freed, and pending (with `pendingEviction`). */
  readonly instances: readonly InstanceView[];
  /** Every address with request state, registered or not. */
  readonly addresses: readonly AddressRequestView[];
  readonly nodes: readonly NodeView[];
}

/**
 * Structural invariants of a snapshot, for the seeded simulation and the
 * property tests. Returns human-readable violations; empty means consistent.
 * (Behavioural invariants — conservation, no resurrection, no phantom — need
 * a history and live in the tests.)
 */
export function checkSnapshotInvariants(s: WatchdogSnapshot): string[] {
  const out: string[] = [];
  const registeredAt = new Map<string, string>();
  let loaded = 0;
  const perNode = new Map<string, number>();
  for (const i of s.instances) {
    perNode.set(i.nodeId, (perNode.get(i.nodeId) ?? 0) + 1);
    if (i.state === "reserved") {
      if (i.address !== undefined) out.push(`reserved ${i.incarnation} has an address`);
      if (i.pendingEviction !== undefined) out.push(`reserved ${i.incarnation} is pending`);
      continue;
    }
    if (i.address === undefined) out.push(`${i.state} ${i.incarnation} has no address`);
    if (i.pendingEviction !== undefined) {
      if (i.pendingEviction.command.incarnation !== i.incarnation) out.push(`pending ${i.incarnation} carries another command`);
      continue;
    }
    loaded++;
    if (i.address !== undefined) {
      const other = registeredAt.get(i.address);
      if (other !== undefined) out.push(`address ${i.address} registered to ${other} and ${i.incarnation}`);
      registeredAt.set(i.address, i.incarnation);
    }
  }
  if (loaded !== s.loadedCount) out.push(`loadedCount ${s.loadedCount} != registered ${loaded}`);
  for (const a of s.addresses) {
    if (a.inFlight < 0) out.push(`address ${a.address} in-flight ${a.inFlight} < 0`);
    if (a.inFlight !== a.openRequestIds.length) out.push(`address ${a.address} in-flight ${a.inFlight} != open ids ${a.openRequestIds.length}`);
    if ((a.inFlight > 0) !== (a.busySinceMs !== undefined)) out.push(`address ${a.address} busy-since inconsistent with in-flight ${a.inFlight}`);
    if (a.inFlight > 0 && a.idleSinceMs !== undefined) out.push(`address ${a.address} idle while ${a.inFlight} in flight`);
  }
  for (const n of s.nodes) {
    const o = n.occupancy;
    const sum = o.reserved + o.loading + o.ready + o.freed + o.pendingEviction + o.leftovers + o.orphans + o.unconfirmed;
    if (sum !== o.total) out.push(`node ${n.nodeId} occupancy total ${o.total} != ${sum}`);
    const own = o.total - o.leftovers - o.orphans - o.unconfirmed;
    if (own !== (perNode.get(n.nodeId) ?? 0)) out.push(`node ${n.nodeId} counts ${own} instances, snapshot has ${perNode.get(n.nodeId) ?? 0}`);
    if (o.leftovers + o.orphans + o.unconfirmed !== n.occupancyEntries.length) out.push(`node ${n.nodeId} occupancy entries mismatch`);
  }
  for (const [nodeId] of perNode) if (!s.nodes.some((n) => n.nodeId === nodeId)) out.push(`instances on unknown node ${nodeId}`);
  return out;
}

/**
 * Group conflicts on a node between instances (any state) and occupancy
 * entries of different models: pairs `[a, b]` of incarnations/keys. Used to
 * check "groups exclusive per node after every admission".
 */
export function groupConflicts(s: WatchdogSnapshot, nodeId: string): [string, string][] {
  const items: { id: string; model: string | undefined; groups: readonly string[] }[] = [];
  for (const i of s.instances) if (i.nodeId === nodeId) items.push({ id: i.incarnation, model: i.model, groups: i.groups });
  for (const n of s.nodes) if (n.nodeId === nodeId) for (const e of n.occupancyEntries) items.push({ id: e.key, model: e.model, groups: e.groups });
  const out: [string, string][] = [];
  for (let x = 0; x < items.length; x++) {
    for (let y = x + 1; y < items.length; y++) {
      const a = items[x];
      const b = items[y];
      if (a === undefined || b === undefined || a.model === b.model) continue;
      if (a.groups.some((g) => b.groups.includes(g))) out.push([a.id, b.id]);
    }
  }
  return out;
}
