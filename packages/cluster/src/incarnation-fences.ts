import type { InventoryEntry } from "@warden/proto";

/** Cap on open fences per node (confirmed stops within about one heartbeat). */
export const maxFencesPerNode = 4096;

/**
 * Fences `incarnation` at `sequence` (the last seen when its stop was
 * confirmed); re-fencing moves it to the newest. Oldest out past the cap.
 */
export function fenceIncarnation(fences: Map<string, bigint>, incarnation: string, sequence: bigint): void {
  fences.delete(incarnation);
  fences.set(incarnation, sequence);
  if (fences.size > maxFencesPerNode) {
    const oldest = fences.keys().next().value;
    if (oldest !== undefined) fences.delete(oldest);
  }
}

/**
 * The inventory without what is known gone: fenced incarnations while this
 * heartbeat may predate their confirmation (sequence ≤ fence + 1), and any
 * `isGone` says are gone. Fences this heartbeat is beyond are released.
 * Returns `backends` itself when nothing is dropped.
 */
export function unfencedInventory(fences: Map<string, bigint>, sequence: bigint, backends: InventoryEntry[], isGone: ((incarnation: string) => boolean) | undefined): InventoryEntry[] {
  for (const [inc, at] of fences) if (sequence > at + 1n) fences.delete(inc);
  if (fences.size === 0 && isGone === undefined) return backends;
  let out: InventoryEntry[] | undefined;
  for (const [i, e] of backends.entries()) {
    const drop = fences.has(e.incarnation) || isGone?.(e.incarnation) === true;
    if (drop && out === undefined) out = backends.slice(0, i);
    else if (!drop && out !== undefined) out.push(e);
  }
  return out ?? backends;
}
