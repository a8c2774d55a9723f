/** What one applied inventory settles of a node's open stop intents. */
export interface GoneIntents {
  /** Incarnations lacking from this inventory and the one before it: their intents are done. */
  readonly gone: readonly string[];
  /** The counts to keep for the next inventory: only watched incarnations lacking from this one. */
  readonly missing: ReadonlyMap<string, number>;
}

/**
 * Counts one applied inventory of a node against its open stop intents that
 * the loader no longer tracks (`watched`): one lacking from two applied
 * inventories in a row is gone, one present resets. A single inventory is not
 * enough: one delayed from before the start, or taken before a coordinator
 * restart, lacks a process that still runs, and clearing its intent forgets
 * it (invariant 1) — the rule reconcileInventory applies to ready instances
 * and leftovers. Counts of incarnations no longer watched (intent cleared,
 * or the loader tracks it again) are dropped, so what is kept never exceeds
 * the node's open intents.
 */
export function goneIntents(missing: ReadonlyMap<string, number>, watched: Iterable<string>, present: Pick<ReadonlySet<string>, "has">): GoneIntents {
  const gone: string[] = [];
  // Built only when something is counted: on nearly every heartbeat nothing is watched, and a
  // new map per heartbeat, kept on the node record, would outlive the young generation each time.
  let next: Map<string, number> | undefined;
  let counted: Set<string> | undefined;
  for (const incarnation of watched) {
    counted ??= new Set<string>();
    if (counted.has(incarnation)) continue;
    counted.add(incarnation);
    if (present.has(incarnation)) continue;
    const count = (missing.get(incarnation) ?? 0) + 1;
    if (count >= 2) gone.push(incarnation);
    else (next ??= new Map<string, number>()).set(incarnation, count);
  }
  return { gone, missing: next ?? (missing.size === 0 ? missing : noneMissing) };
}

/** Nothing counted: shared, never written (the counts are only ever replaced whole). */
const noneMissing: ReadonlyMap<string, number> = new Map<string, number>();

/** The incarnations of `open` (a node's open stop intents) the loader no longer tracks: the ones goneIntents watches. */
export function untracked(open: Iterable<string>, loader: { knows(incarnation: string): boolean }): string[] {
  const out: string[] = [];
  for (const inc of open) if (!loader.knows(inc)) out.push(inc);
  return out;
}
