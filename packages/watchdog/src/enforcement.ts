/**
 * The two admission-time eviction paths on one node: group exclusivity and
 * the per-node limit (LRU). `admit` runs them in that order; the service
 * also runs them on their own to retry a wait.
 */
import { isPlanted } from "@warden/common";
import { groupsOf } from "./core-policy.js";
import type { CoreState, InstanceRecord } from "./core-state.js";
import type { EnforcementDecision, Occupancy, Shortfall } from "./decision.js";
import { detach, isBusy, orderVictims } from "./detach.js";
import { nodeOccupancy } from "./occupancy.js";
import type { StopCommand } from "./stop-command.js";

const emptyShortfall: Shortfall = Object.freeze({
  missing: 0,
  pinned: 0,
  busy: 0,
  loading: 0,
  reserved: 0,
  freed: 0,
  pending: 0,
  leftovers: 0,
  orphans: 0,
});

/**
 * Group exclusivity on a node for `model` (localai-semantics §3.1, per
 * node). Every conflict must go: ready ones are selected (skipping pinned,
 * and busy unless force); anything else in a conflicting group — pinned,
 * busy, loading, reserved, freed, pending, leftover, orphan, unconfirmed —
 * sets need-more: an unconfirmed one cannot be stopped before its node
 * reports, so the load waits for that report (or the node's loss).
 */
export function enforceGroups(st: CoreState, nodeId: string, model: string, trigger: string | undefined, spare?: ReadonlySet<string>): EnforcementDecision & { readonly conflicts: number } {
  const wanted = groupsOf(st, model);
  if (wanted.length === 0) return { stops: [], needMore: false, shortfall: emptyShortfall, conflicts: 0 };
  const n = st.nodes.get(nodeId);
  if (n === undefined) return { stops: [], needMore: false, shortfall: emptyShortfall, conflicts: 0 };
  const wantedSet = new Set(wanted);
  const shares = (groups: readonly string[]): boolean => groups.some((g) => wantedSet.has(g));
  const force = st.policy.forceEvictionWhenBusy;
  const sf: { -readonly [K in keyof Shortfall]: Shortfall[K] } = { ...emptyShortfall };
  let conflicts = 0;
  const candidates: InstanceRecord[] = [];
  for (const r of n.instances) {
    if (r.model === model || !shares(groupsOf(st, r.model))) continue;
    if (r.state.t === "pending" && isPlanted("admission-ignores-pending")) continue;
    conflicts++;
    switch (r.state.t) {
      case "ready":
        if (st.pinned.has(r.model)) sf.pinned++;
        else if (spare?.has(r.incarnation) === true) sf.spared = (sf.spared ?? 0) + 1;
        else if (!force && isBusy(st, r)) sf.busy++;
        else candidates.push(r);
        break;
      case "reserved":
        sf.reserved++;
        break;
      case "loading":
        sf.loading++;
        break;
      case "freed":
        sf.freed++;
        break;
      case "pending":
        sf.pending++;
        break;
    }
  }
  for (const e of n.occupancy) {
    if (e.model === model || !shares(e.groups)) continue;
    conflicts++;
    if (e.kind === "leftover") sf.leftovers++;
    else if (e.kind === "orphan") sf.orphans++;
    else sf.unconfirmed = (sf.unconfirmed ?? 0) + 1;
  }
  // A spared conflict never goes, so evicting the others would free nothing usable, and waiting frees nothing.
  const spared = sf.spared ?? 0;
  const stops = spared > 0 ? [] : orderVictims(st, candidates).map((r) => detach(st, r, "group", isBusy(st, r), trigger));
  sf.missing = conflicts - stops.length;
  return { stops, needMore: spared === 0 && stops.length < conflicts, shortfall: sf, conflicts };
}

/**
 * The per-node limit (localai-semantics §3.2 with DESIGN §3.4 item 3):
 * `toEvict = occupied + 1 − limit − pendingEviction`. Need-more when a
 * shortfall has any cause but pins (or spared victims), or when evictions
 * are pending. A pins-alone shortfall does not set it (`pinsOnly`).
 */
export function enforceLimit(
  st: CoreState,
  nodeId: string,
  trigger: string | undefined,
  spare?: ReadonlySet<string>,
): EnforcementDecision & { readonly fits: boolean; readonly pinsOnly: boolean; readonly occupancy: Occupancy } {
  const counted = nodeOccupancy(st, nodeId);
  // Planted bug "admission-ignores-pending": an eviction in flight is taken as already done.
  const occ = isPlanted("admission-ignores-pending") ? { ...counted, total: counted.total - counted.pendingEviction, pendingEviction: 0 } : counted;
  const limit = st.policy.limitPerNode;
  if (limit <= 0 || occ.total + 1 <= limit) return { stops: [], needMore: false, shortfall: emptyShortfall, fits: true, pinsOnly: false, occupancy: occ };
  const toEvict = occ.total + 1 - limit - occ.pendingEviction;
  const sf: { -readonly [K in keyof Shortfall]: Shortfall[K] } = {
    ...emptyShortfall,
    reserved: occ.reserved,
    loading: occ.loading,
    freed: occ.freed,
    pending: occ.pendingEviction,
    leftovers: occ.leftovers,
    orphans: occ.orphans,
    ...(occ.unconfirmed === 0 ? {} : { unconfirmed: occ.unconfirmed }),
  };
  const stops: StopCommand[] = [];
  if (toEvict > 0) {
    const n = st.nodes.get(nodeId);
    const ready = n === undefined ? [] : [...n.instances].filter((r) => r.state.t === "ready");
    const force = st.policy.forceEvictionWhenBusy;
    for (const r of orderVictims(st, ready)) {
      if (stops.length >= toEvict) break;
      if (st.pinned.has(r.model)) {
        sf.pinned++;
        continue;
      }
      if (spare?.has(r.incarnation) === true) {
        sf.spared = (sf.spared ?? 0) + 1;
        continue;
      }
      const busy = isBusy(st, r);
      if (busy && !force) {
        sf.busy++;
        continue;
      }
      stops.push(detach(st, r, "lru", busy, trigger));
    }
  }
  const missing = Math.max(0, toEvict - stops.length);
  sf.missing = missing;
  const otherBlockers = sf.busy + sf.reserved + sf.loading + sf.freed + sf.leftovers + sf.orphans + (sf.unconfirmed ?? 0);
  const needMore = occ.pendingEviction > 0 || (missing > 0 && otherBlockers > 0);
  // Spared victims block like pins but never let the admission past the limit (not pins-only), nor
  // make it wait: nothing the admission waits for frees them.
  return { stops, needMore, shortfall: sf, fits: false, pinsOnly: missing > 0 && otherBlockers === 0 && (sf.spared ?? 0) === 0, occupancy: occ };
}
