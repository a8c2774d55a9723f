/**
 * What the replica reconciler (in the loader) reads from the core each pass,
 * without copies: which models' instances changed, and since when a ready
 * replica is idle.
 */
import type { CoreState } from "./core-state.js";
import { refreshSchedule } from "./tick.js";

/**
 * The models whose instances changed since the last call — a transition of
 * one, or the first call starting or the last ending at one's address. The
 * first call only starts collecting (its caller looks at every model once).
 * O(changes).
 */
export function takeChangedModels(st: CoreState): string[] {
  if (st.changedModels === undefined) {
    st.changedModels = new Set();
    return [];
  }
  // Calls noted by the request tracker since the last tick are mapped to their models here.
  refreshSchedule(st);
  const out = [...st.changedModels];
  st.changedModels.clear();
  return out;
}

/** For a ready instance with no call in flight: its address's idle-since, else its ready time; undefined otherwise. O(1). */
export function idleSinceMs(st: CoreState, incarnation: string): number | undefined {
  const r = st.records.get(incarnation);
  if (r?.state.t !== "ready") return undefined;
  if (r.address === undefined) return r.state.sinceMs;
  if (st.requests.inFlight(r.address) > 0) return undefined;
  return st.requests.idleSinceMs(r.address) ?? r.state.sinceMs;
}
