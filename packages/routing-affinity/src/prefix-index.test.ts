import { describe, expect, it } from "vitest";
import { PrefixIndex } from "./prefix-index.js";

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
});
