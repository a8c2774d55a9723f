import { seededRng, type Rng } from "@warden/common";

/** FNV-1a of a label, to derive independent streams from one seed. */
function hashLabel(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * The seeded PRNG (mulberry32 via `seededRng`) with the helpers the
 * simulation needs. `fork(label)` derives an independent stream, so removing
 * one workload step while shrinking does not shift every other random choice.
 */
export class SimRandom implements Rng {
  private readonly r: Rng;

  constructor(readonly seed: number) {
    this.r = seededRng(seed);
  }

  next(): number {
    return this.r.next();
  }

  fork(label: string): SimRandom {
    return new SimRandom((Math.imul(this.seed ^ 0x9e3779b9, 0x85ebca6b) ^ hashLabel(label)) >>> 0);
  }

  /** Integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    const v = items[Math.floor(this.next() * items.length)];
    if (v === undefined) throw new RangeError("pick from an empty list");
    return v;
  }

  /** A random subset (each item kept with probability p). */
  subset<T>(items: readonly T[], p: number): T[] {
    return items.filter(() => this.next() < p);
  }
}
