import { groupsOf } from "./core-policy.js";
import type { CoreState, InstanceRecord } from "./core-state.js";
import type { Occupancy } from "./decision.js";

/** Per-node figures for placement (see `placementSummary`). */
export interface NodePlacementSummary {
  readonly occupied: number;
  readonly accountedBytes: number;
  readonly evictableBytes: number;
  readonly evictableSlots: number;
  readonly evictableConflicts: readonly string[];
  readonly blockingConflicts: readonly string[];
}

const noStrings: readonly string[] = Object.freeze([]);
const emptyPlacementSummary: NodePlacementSummary = Object.freeze({ occupied: 0, accountedBytes: 0, evictableBytes: 0, evictableSlots: 0, evictableConflicts: noStrings, blockingConflicts: noStrings });

/** Whether `other` (another model) is in one of `groups`; a module function, not a per-call closure, on placement's hot path. */
function sharesGroup(model: string, groups: readonly string[], other: string | undefined, otherGroups: Iterable<string>): boolean {
  if (other === model) return false;
  for (const g of otherGroups) if (groups.includes(g)) return true;
  return false;
}

/** Occupancy of a node (DESIGN §3.4 item 3). */
export function nodeOccupancy(st: CoreState, nodeId: string): Occupancy {
  const n = st.nodes.get(nodeId);
  let reserved = 0,
    loading = 0,
    ready = 0,
    freed = 0,
    pendingEviction = 0,
    leftovers = 0,
    orphans = 0,
    unconfirmed = 0,
    accountedBytes = 0;
  if (n !== undefined) {
    for (const r of n.instances) {
      accountedBytes += r.sizeBytes;
      switch (r.state.t) {
        case "reserved":
          reserved++;
          break;
        case "loading":
          loading++;
          break;
        case "ready":
          ready++;
          break;
        case "freed":
          freed++;
          break;
        case "pending":
          pendingEviction++;
          break;
      }
    }
    for (const e of n.occupancy) {
      accountedBytes += e.sizeBytes;
      if (e.kind === "leftover") leftovers++;
      else if (e.kind === "orphan") orphans++;
      else unconfirmed++;
    }
  }
  const total = reserved + loading + ready + freed + pendingEviction + leftovers + orphans + unconfirmed;
  return { reserved, loading, ready, freed, pendingEviction, leftovers, orphans, unconfirmed, total, accountedBytes };
}

/**
 * What placement needs about one node for a load of `model` (DESIGN §3.5),
 * computed from that node's own records — no snapshot, no views — so a
 * placement decision over many nodes stays proportional to their instances.
 * `evictable` means a policy path could select it now: ready, not pending,
 * not pinned, and idle unless force-eviction-when-busy.
 */
export function placementSummary(st: CoreState, nodeId: string, model: string, groups: readonly string[]): NodePlacementSummary {
  const n = st.nodes.get(nodeId);
  if (n === undefined) return emptyPlacementSummary;
  let occupied = 0;
  let accountedBytes = 0;
  let evictableBytes = 0;
  let evictableSlots = 0;
  // Allocated only when a conflict exists: most nodes have none.
  let evictableConflicts: string[] | undefined;
  let blockingConflicts: string[] | undefined;
  const force = st.policy.forceEvictionWhenBusy;
  for (const r of n.instances) {
    occupied++;
    accountedBytes += r.sizeBytes;
    const ready = r.state.t === "ready";
    const pinned = st.pinned.has(r.model);
    const evictable = ready && !pinned && (force || r.address === undefined || st.requests.inFlight(r.address) === 0);
    if (evictable) {
      evictableBytes += r.sizeBytes;
      evictableSlots++;
    }
    if (groups.length > 0 && sharesGroup(model, groups, r.model, groupsOf(st, r.model))) {
      if (evictable) (evictableConflicts ??= []).push(r.model);
      else (blockingConflicts ??= []).push(`${r.model} (${r.state.t === "pending" ? "pending eviction" : pinned ? "pinned" : ready ? "busy" : r.state.t})`);
    }
  }
  for (const e of n.occupancy) {
    occupied++;
    accountedBytes += e.sizeBytes;
    if (groups.length > 0 && sharesGroup(model, groups, e.model, e.groups)) (blockingConflicts ??= []).push(`${e.kind} ${e.model ?? e.key}`);
  }
  return { occupied, accountedBytes, evictableBytes, evictableSlots, evictableConflicts: evictableConflicts ?? noStrings, blockingConflicts: blockingConflicts ?? noStrings };
}

/**
 * What an admission of `model` on the node would evict first, as
 * `model@incarnation` (ExplainPlacement): its ready, unpinned instances of
 * other models in one of `groups`, then, when `limit` > 0 and the node
 * (`occupied` slots) has no room left, the least recently used idle ones.
 * Never a replica of `model` itself: that would make no room for it. Read from
 * the node's own records, no views: proportional to the node's instances.
 */
export function placementEvictions(st: CoreState, nodeId: string, model: string, groups: readonly string[], limit: number, occupied: number): string[] {
  const n = st.nodes.get(nodeId);
  if (n === undefined) return [];
  const out: string[] = [];
  for (const r of n.instances) if (r.state.t === "ready" && r.model !== model && !st.pinned.has(r.model) && groups.length > 0 && sharesGroup(model, groups, r.model, groupsOf(st, r.model))) out.push(`${r.model}@${r.incarnation}`);
  const need = limit > 0 ? occupied + 1 - limit - out.length : 0;
  if (need <= 0) return out;
  // Only when the conflicts leave the node over its limit: the request state is read for this pass alone.
  const rest: { readonly r: InstanceRecord; readonly lastUsedMs: number }[] = [];
  for (const r of n.instances) {
    if (r.state.t !== "ready" || r.model === model || st.pinned.has(r.model)) continue;
    if (groups.length > 0 && sharesGroup(model, groups, r.model, groupsOf(st, r.model))) continue;
    if (r.address === undefined) rest.push({ r, lastUsedMs: 0 });
    else if (st.requests.inFlight(r.address) === 0) rest.push({ r, lastUsedMs: st.requests.lastUsedMs(r.address) ?? 0 });
  }
  // Stable: equally recent ones keep the node's order.
  rest.sort((a, b) => a.lastUsedMs - b.lastUsedMs);
  for (let i = 0; i < need && i < rest.length; i++) {
    const r = rest[i]?.r;
    if (r !== undefined) out.push(`${r.model}@${r.incarnation}`);
  }
  return out;
}
