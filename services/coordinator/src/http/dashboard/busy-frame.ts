import type { DashboardInstance, DashboardSnapshot } from "./dashboard-view.js";

/** A `busy` frame of the dashboard's stream: in-flight counts changed since the previous one. */
export interface BusyFrame {
  readonly at: string;
  readonly instances: readonly { readonly incarnation: string; readonly inFlight: number }[];
}

/** Each snapshot's instances by incarnation, built at its first busy frame (a snapshot is replaced whole, never edited elsewhere). */
const indexes = new WeakMap<DashboardSnapshot, Map<string, DashboardInstance>>();

/**
 * Applies a `busy` frame to the snapshot the page shows: each named instance
 * takes its new in-flight count (busy-since set at the frame's time when it
 * turns busy, cleared when idle). Instances the snapshot does not hold yet
 * are left to the next snapshot. Returns whether anything changed. O(frame)
 * after the snapshot's index is built once.
 */
export function applyBusy(s: DashboardSnapshot, f: BusyFrame): boolean {
  let index = indexes.get(s);
  if (index === undefined) {
    index = new Map(s.instances.map((i) => [i.incarnation, i]));
    indexes.set(s, index);
  }
  let changed = false;
  for (const b of f.instances) {
    const i = index.get(b.incarnation);
    if (i === undefined || i.inFlight === b.inFlight) continue;
    const mutable = i as { inFlight: number; busySince: string };
    if (b.inFlight > 0 && i.inFlight === 0) mutable.busySince = f.at;
    if (b.inFlight === 0) mutable.busySince = "";
    mutable.inFlight = b.inFlight;
    changed = true;
  }
  return changed;
}
