import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { PrefixIndex, type PrefixIndexBounds } from "./prefix-index.js";

/** The index's rules, as plainly as they can be written (one array in recency order, every operation a scan). */
class ReferenceIndex {
  entries: { replica: string; hash: number; atMs: number }[] = [];
  known = new Set<string>();
  constructor(private readonly b: PrefixIndexBounds) {}
  expire(nowMs: number): void {
    while (this.entries.length > 0 && nowMs - (this.entries[0]?.atMs ?? 0) >= this.b.ttlMs) this.removeAt(0);
  }
  removeAt(i: number, keep?: string): void {
    const [e] = this.entries.splice(i, 1);
    if (e !== undefined && e.replica !== keep && !this.entries.some((x) => x.replica === e.replica)) this.known.delete(e.replica);
  }
  record(replica: string, hashes: readonly number[], nowMs: number): void {
    this.expire(nowMs);
    this.known.add(replica);
    for (const hash of [...hashes].reverse()) {
      const i = this.entries.findIndex((e) => e.replica === replica && e.hash === hash);
      if (i >= 0) this.entries.splice(i, 1);
      this.entries.push({ replica, hash, atMs: nowMs });
      if (i >= 0) continue;
      if (this.entries.filter((e) => e.replica === replica).length > this.b.maxEntriesPerReplica) this.removeAt(this.entries.findIndex((e) => e.replica === replica), replica);
      if (this.entries.length > this.b.maxEntries) this.removeAt(0, replica);
    }
    if (!this.entries.some((e) => e.replica === replica)) this.known.delete(replica);
  }
  matchLength(replica: string, hashes: readonly number[], nowMs: number): number {
    let n = 0;
    for (const hash of hashes) {
      const e = this.entries.find((x) => x.replica === replica && x.hash === hash);
      if (e === undefined || nowMs - e.atMs >= this.b.ttlMs) break;
      n++;
    }
    return n;
  }
  drop(replica: string): void {
    this.entries = this.entries.filter((e) => e.replica !== replica);
    this.known.delete(replica);
  }
}

const bounds = { maxEntries: 10, maxEntriesPerReplica: 6, ttlMs: 1_000 };

describe("PrefixIndex", () => {
  it("matches the leading blocks a replica was sent, stopping at the first miss", () => {
    const ix = new PrefixIndex(bounds);
    ix.record("r1", [1, 2, 3], 0);
    expect(ix.matchLength("r1", [1, 2, 3, 4], 10)).toBe(3);
    expect(ix.matchLength("r1", [1, 9, 3], 10)).toBe(1);
    expect(ix.matchLength("r2", [1, 2, 3], 10)).toBe(0);
  });

  it("keeps each replica under its cap, evicting the least recently sent, leading blocks last", () => {
    const ix = new PrefixIndex(bounds);
    ix.record("r1", [1, 2, 3, 4], 0);
    ix.record("r1", [1, 2, 7, 8], 1);
    // Order, least recent first: 4 3 8 7 2 1 (each prompt recorded last block first; 1 and 2 touched again).
    expect(ix.sizeOf("r1")).toBe(6);
    ix.record("r1", [1, 20], 2);
    // 20 made seven: 4, the least recently sent, went.
    expect(ix.sizeOf("r1")).toBe(6);
    expect(ix.matchLength("r1", [1, 2, 7, 8], 3)).toBe(4);
    expect(ix.matchLength("r1", [1, 2, 3, 4], 3)).toBe(3);
  });

  it("keeps the total under its cap across replicas", () => {
    const ix = new PrefixIndex(bounds);
    for (let r = 0; r < 5; r++) ix.record(`r${String(r)}`, [r * 10 + 1, r * 10 + 2, r * 10 + 3], r);
    expect(ix.size).toBeLessThanOrEqual(10);
    // The oldest replica's entries went first.
    expect(ix.matchLength("r0", [1, 2, 3], 5)).toBe(0);
    expect(ix.matchLength("r4", [41, 42, 43], 5)).toBe(3);
  });

  it("expires entries after the TTL and forgets a dropped replica", () => {
    const ix = new PrefixIndex(bounds);
    ix.record("r1", [1, 2], 0);
    ix.record("r2", [1, 2], 500);
    expect(ix.matchLength("r1", [1, 2], 999)).toBe(2);
    expect(ix.matchLength("r1", [1, 2], 1_000)).toBe(0);
    ix.expire(1_200);
    expect(ix.size).toBe(2);
    expect(ix.replicas).toBe(1);
    ix.drop("r2");
    expect(ix.size).toBe(0);
    expect(ix.replicas).toBe(0);
  });

  it("a replica whose own entries the total cap evicts while it records stays consistent", () => {
    const ix = new PrefixIndex({ maxEntries: 2, maxEntriesPerReplica: 100, ttlMs: 1_000 });
    ix.record("r1", [1, 2, 3, 4, 5], 0);
    expect(ix.size).toBe(2);
    expect(ix.sizeOf("r1")).toBe(2);
    expect(ix.matchLength("r1", [1, 2], 1)).toBe(2);
    ix.drop("r1");
    expect(ix.size).toBe(0);
  });

  it("property: behaves as the plain reference under random records, matches, expiries and drops", () => {
    const replica = fc.constantFrom("r0", "r1", "r2");
    const hashes = fc.array(fc.integer({ min: 0, max: 8 }), { maxLength: 5 });
    const op = fc.oneof(
      fc.record({ t: fc.constant("record" as const), r: replica, h: hashes, dt: fc.nat(20) }),
      fc.record({ t: fc.constant("expire" as const), dt: fc.nat(20) }),
      fc.record({ t: fc.constant("drop" as const), r: replica }),
    );
    const bounds = fc.record({ maxEntries: fc.integer({ min: 1, max: 10 }), maxEntriesPerReplica: fc.integer({ min: 1, max: 6 }), ttlMs: fc.integer({ min: 1, max: 60 }) });
    fc.assert(
      fc.property(bounds, fc.array(op, { maxLength: 60, size: "large" }), fc.array(hashes, { minLength: 1, maxLength: 4 }), (b, ops, probes) => {
        const ix = new PrefixIndex(b);
        const ref = new ReferenceIndex(b);
        let now = 0;
        for (const o of ops) {
          if (o.t === "record") {
            now += o.dt;
            ix.record(o.r, o.h, now);
            ref.record(o.r, o.h, now);
          } else if (o.t === "expire") {
            now += o.dt;
            ix.expire(now);
            ref.expire(now);
          } else {
            ix.drop(o.r);
            ref.drop(o.r);
          }
          expect(ix.size).toBe(ref.entries.length);
          expect(ix.replicas).toBe(ref.known.size);
          for (const r of ["r0", "r1", "r2"]) {
            expect(ix.sizeOf(r)).toBe(ref.entries.filter((e) => e.replica === r).length);
            for (const p of probes) expect(ix.matchLength(r, p, now)).toBe(ref.matchLength(r, p, now));
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});
