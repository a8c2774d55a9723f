import { isPlanted } from "@warden/common";

/** One routable replica as the prefix decision sees it. */
export interface AffinityCandidate {
  readonly id: string;
  /** Calls in flight on it now. */
  readonly inFlight: number;
  /** Leading blocks of the call's prompt this replica was recently sent (its likely cached prefix). */
  readonly matchedBlocks: number;
}

export interface AffinityPick {
  readonly id: string;
  /** `prefix`: a replica holding part of the prompt; `least-loaded`: none does within the margin. */
  readonly why: "prefix" | "least-loaded";
}

/**
 * Picks the replica a call goes to under `routing: prefix`: among the
 * replicas whose in-flight count is at most `marginCalls` above the least
 * loaded one's, the one with the longest matching prefix (ties: fewer in
 * flight, then candidate order); when none of those matches a block, the
 * least loaded (`leastLoadedId` when it is one of the least loaded — the
 * default policy's own tie-break by last use — else the first of them).
 * A replica with a longer match but more than `marginCalls` extra calls is
 * passed over: affinity never piles calls onto one replica past the margin.
 * `candidates` must not be empty. Pure: O(candidates).
 */
export function chooseByPrefix(candidates: readonly AffinityCandidate[], leastLoadedId: string | undefined, marginCalls: number): AffinityPick {
  const first = candidates[0];
  if (first === undefined) throw new RangeError("chooseByPrefix: no candidates");
  let minInFlight = Infinity;
  for (const c of candidates) if (c.inFlight < minInFlight) minInFlight = c.inFlight;
  // Planted bug "prefix-ignores-margin": every matching replica is eligible, however loaded.
  const margin = isPlanted("prefix-ignores-margin") ? Infinity : marginCalls;
  let best: AffinityCandidate | undefined;
  let least: AffinityCandidate | undefined;
  for (const c of candidates) {
    if (c.inFlight === minInFlight && (least === undefined || c.id === leastLoadedId)) least = c;
    if (c.matchedBlocks <= 0 || c.inFlight - minInFlight > margin) continue;
    if (best === undefined || c.matchedBlocks > best.matchedBlocks || (c.matchedBlocks === best.matchedBlocks && c.inFlight < best.inFlight)) best = c;
  }
  if (best !== undefined) return { id: best.id, why: "prefix" };
  return { id: (least ?? first).id, why: "least-loaded" };
}
