import { describe, expect, it } from "vitest";
import { planRoom, roomBytes, type CacheEntry } from "./cache-room-plan.js";

const e = (c: string, sizeBytes: number, lastUsedMs: number, kind: CacheEntry["kind"] = "final"): CacheEntry => ({ sha256: c.repeat(64), kind, sizeBytes, lastUsedMs });
const base = { heldBytes: 0, reservedBytes: 0, budgetBytes: 100, fsFreeBytes: 1000, entries: [] as CacheEntry[], isProtected: () => false };

describe("planRoom", () => {
  it("evicts nothing when the pull fits the budget and the disk", () => {
    expect(planRoom({ ...base, needBytes: 100 })).toEqual({ t: "room", evict: [] });
  });

  it("evicts least recently used unprotected files until the deficit is covered", () => {
    const entries = [e("a", 30, 5), e("b", 30, 1), e("c", 30, 3), e("d", 10, 0)];
    const plan = planRoom({ ...base, heldBytes: 100, entries, needBytes: 35, isProtected: (x) => x.sha256 === "d".repeat(64) });
    expect(plan).toEqual({ t: "room", evict: [entries[1], entries[2]] });
  });

  it("the file system's free space bounds too, and other pulls' promises count", () => {
    expect(roomBytes({ heldBytes: 10, reservedBytes: 5, budgetBytes: undefined, fsFreeBytes: 50 })).toBe(45);
    expect(roomBytes({ heldBytes: 10, reservedBytes: 5, budgetBytes: 30, fsFreeBytes: 50 })).toBe(15);
    const plan = planRoom({ ...base, budgetBytes: undefined, fsFreeBytes: 10, heldBytes: 40, entries: [e("a", 40, 1)], needBytes: 20 });
    expect(plan).toEqual({ t: "room", evict: [e("a", 40, 1)] });
  });

  it("evicts nothing when even every unprotected file is not enough, and says why", () => {
    const entries = [e("a", 50, 1), e("b", 40, 2, "partial")];
    const plan = planRoom({ ...base, heldBytes: 90, entries, needBytes: 60, isProtected: (x) => x.sha256 === "a".repeat(64) });
    expect(plan).toEqual({ t: "no-room", reason: "60 bytes to fetch; a disk budget of 100 bytes with 90 held, 1000 free on the file system; evicting every file no backend uses would free 40 (50 in use)" });
  });

  it("counts installed bundles with the files: one LRU order across both, an in-use bundle or file never chosen", () => {
    const entries = [e("a", 20, 1, "bundle"), e("b", 20, 2), e("c", 30, 3, "bundle"), e("d", 20, 0, "bundle"), e("f", 10, 4, "partial")];
    // d (a running backend's bundle) is oldest but protected; a (bundle), b (file), c (bundle) go in LRU order.
    const plan = planRoom({ ...base, heldBytes: 100, entries, needBytes: 70, isProtected: (x) => x.sha256 === "d".repeat(64) });
    expect(plan).toEqual({ t: "room", evict: [entries[0], entries[1], entries[2]] });
    // A bundle and a file with the same use time: the order is still deterministic (by digest).
    const tie = [e("b", 50, 1, "bundle"), e("a", 50, 1)];
    expect(planRoom({ ...base, heldBytes: 100, entries: tie, needBytes: 50 })).toEqual({ t: "room", evict: [tie[1]] });
    // Every bundle in use: nothing evicted when the files alone cannot make room.
    const busy = planRoom({ ...base, heldBytes: 100, entries, needBytes: 95, isProtected: (x) => x.kind === "bundle" });
    expect(busy.t).toBe("no-room");
  });
});
