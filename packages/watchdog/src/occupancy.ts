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
  /** Only when asked (`EvictionAsk`): what an admission of the model on the node would evict first, as `model@incarnation`. */
  readonly evictions?: readonly string[];
}

/** Asks `placementSummary` for the evictions too, under a limit of `limit` instances per node (0: none). */
export interface EvictionAsk {
  readonly limit: number;
}

const noStrings: readonly string[] = Object.freeze([]);
const emptyPlacementSummary: NodePlacementSummary = Object.freeze({ occupied: 0, accountedBytes: 0, evictableBytes: 0, evictableSlots: 0, evictableConflicts: noStrings, blockingConflicts: noStrings });
const emptyWithEvictions: NodePlacementSummary = Object.freeze({ ...emptyPlacementSummary, evictions: noStrings });

/**
 * Whether `other` (another model) is in one of `groups`; a module function, not a per-call closure, on placement's
 * hot path. Indexed loops: an iterator over arrays of several shapes allocates per step, per instance of the cluster.
 */
function sharesGroup(model: string, groups: readonly string[], other: string | undefined, otherGroups: readonly string[]): boolean {
  if (otherGroups.length === 0 || other === model) return false;
  for (let i = 0; i < otherGroups.length; i++) if (groups.includes(otherGroups[i] as string)) return true;
  return false;
}

/** Whether two group lists are the same, in order. */
function sameGroups(a: readonly string[], b: readonly string[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The models other than `model` in one of `groups` (see `CoreState.conflicts`): O(models with groups) once per policy and question. */
function conflictingModels(st: CoreState, model: string, groups: readonly string[]): ReadonlySet<string> {
  const m = st.conflicts;
  if (m !== undefined && m.policy === st.policy && m.model === model && sameGroups(m.groups, groups)) return m.models;
  const models = new Set<string>();
  for (const other of Object.keys(st.policy.modelGroups)) if (sharesGroup(model, groups, other, groupsOf(st, other))) models.add(other);
  st.conflicts = { policy: st.policy, model, groups: [...groups], models };
  return models;
}

/** `list` with `s` added; a new list holds just `s` (a one-element literal: `[]` then push reserves 16 slots, per node). */
function append(list: string[] | undefined, s: string): string[] {
  if (list === undefined) return [s];
  list.push(s);
  return list;
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
 *
 * With `evict`, also what an admission of `model` on the node would evict
 * first (ExplainPlacement), read in the same pass: its ready, unpinned
 * instances of other models in one of `groups`, then, when `evict.limit` > 0
 * and the node has no slot left after those, the least recently used idle
 * ones. Never a replica of `model` itself: that would make no room for it.
 * One pass, not two: at ~100 000 instances each record read is a cache miss.
 */
export function placementSummary(st: CoreState, nodeId: string, model: string, groups: readonly string[], evict?: EvictionAsk): NodePlacementSummary {
  const n = st.nodes.get(nodeId);
  if (n === undefined) return evict === undefined ? emptyPlacementSummary : emptyWithEvictions;
  let occupied = 0;
  let accountedBytes = 0;
  let evictableBytes = 0;
  let evictableSlots = 0;
  // Allocated only when a conflict exists: most nodes have none.
  let evictableConflicts: string[] | undefined;
  let blockingConflicts: string[] | undefined;
  let evictions: string[] | undefined;
  const force = st.policy.forceEvictionWhenBusy;
  // Each lookup below reads a string of the record and probes a table: at ~100 000 instances these are cache
  // misses, so a table that is empty (no pinned model) is not probed, and in-flight is read from the small
  // set of busy addresses (`idle`), not the map of every address.
  const anyPinned = st.pinned.size > 0;
  // The idle instances an admission could evict by age are gathered only when the node could be over its limit.
  const byAge = evict !== undefined && evict.limit > 0 && n.instances.size + n.occupancy.length + 1 > evict.limit;
  let idleOthers: InstanceRecord[] | undefined;
  const conflicting = groups.length > 0 ? conflictingModels(st, model, groups) : undefined;
  for (const r of n.instances) {
    occupied++;
    accountedBytes += r.sizeBytes;
    const ready = r.state.t === "ready";
    const pinned = anyPinned && st.pinned.has(r.model);
    const open = ready && !pinned;
    const idle = open && (r.address === undefined || st.requests.idle(r.address));
    const evictable = open && (force || idle);
    if (evictable) {
      evictableBytes += r.sizeBytes;
      evictableSlots++;
    }
    if (conflicting !== undefined && conflicting.has(r.model)) {
      if (evictable) evictableConflicts = append(evictableConflicts, r.model);
      else (blockingConflicts ??= []).push(`${r.model} (${r.state.t === "pending" ? "pending eviction" : pinned ? "pinned" : ready ? "busy" : r.state.t})`);
      // A conflict is evicted busy or not: the admission stops it.
      if (evict !== undefined && open) evictions = append(evictions, `${r.model}@${r.incarnation}`);
    } else if (byAge && idle && r.model !== model) (idleOthers ??= []).push(r);
  }
  for (const e of n.occupancy) {
    occupied++;
    accountedBytes += e.sizeBytes;
    if (groups.length > 0 && sharesGroup(model, groups, e.model, e.groups)) (blockingConflicts ??= []).push(`${e.kind} ${e.model ?? e.key}`);
  }
  if (evict === undefined) return { occupied, accountedBytes, evictableBytes, evictableSlots, evictableConflicts: evictableConflicts ?? noStrings, blockingConflicts: blockingConflicts ?? noStrings };
  const need = occupied + 1 - evict.limit - (evictions?.length ?? 0);
  if (byAge && need > 0 && idleOthers !== undefined) {
    // Only when the conflicts leave the node over its limit: last-used is read for these alone.
    const others = idleOthers;
    const lastUsed = others.map((r) => (r.address === undefined ? 0 : (st.requests.lastUsedMs(r.address) ?? 0)));
    // The least recently used first; equally recent ones in the node's order.
    const order = others.map((_, i) => i).sort((a, b) => (lastUsed[a] ?? 0) - (lastUsed[b] ?? 0) || a - b);
    for (let i = 0; i < need && i < order.length; i++) {
      const r = others[order[i] ?? 0];
      if (r !== undefined) evictions = append(evictions, `${r.model}@${r.incarnation}`);
    }
  }
  return { occupied, accountedBytes, evictableBytes, evictableSlots, evictableConflicts: evictableConflicts ?? noStrings, blockingConflicts: blockingConflicts ?? noStrings, evictions: evictions ?? noStrings };
}
