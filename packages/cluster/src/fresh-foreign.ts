import type { ForeignProcess } from "@warden/proto";

/**
 * The foreign processes in `next` that `before` did not list (by pid and
 * address): a heartbeat reports these once, coalesced. Foreign processes are
 * only reported, never signalled.
 */
export function freshForeign(before: readonly ForeignProcess[], next: readonly ForeignProcess[]): ForeignProcess[] {
  const key = (f: ForeignProcess): string => `${String(f.pid)}@${f.address}`;
  const known = new Set(before.map(key));
  return next.filter((f) => !known.has(key(f)));
}
