import { describe, expect, it } from "vitest";
import { planRoom, roomBytes, roomToMake, type CacheEntry } from "./cache-room-plan.js";

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

describe("roomToMake", () => {
  it("is the room now plus every unprotected entry, and planRoom finds room exactly up to it", () => {
    const entries = [e("a", 30, 1), e("b", 20, 2, "bundle"), e("c", 25, 3, "partial")];
    const q = { ...base, heldBytes: 75, reservedBytes: 5, entries, isProtected: (x: CacheEntry) => x.sha256 === "c".repeat(64) };
    // 100 − 75 − 5 = 20 free under the budget, + a and b (c is in use).
    const made = roomToMake(q);
    expect(made.bytes).toBe(70);
    expect(made.reason).toBe("a disk budget of 100 bytes with 75 held, 1000 free on the file system, 5 promised to other pulls; evicting every file no backend uses would free 50 (25 in use)");
    for (const needBytes of [0, 20, 21, 69, 70]) expect(planRoom({ ...q, needBytes }).t).toBe("room");
    expect(planRoom({ ...q, needBytes: 71 }).t).toBe("no-room");
  });

  it("is bounded by the file system when it is smaller than the budget, and never counts a protected entry", () => {
    const entries = [e("a", 30, 1)];
    expect(roomToMake({ ...base, budgetBytes: undefined, fsFreeBytes: 10, heldBytes: 30, entries }).bytes).toBe(40);
    expect(roomToMake({ ...base, heldBytes: 30, entries, isProtected: () => true }).bytes).toBe(70);
    // Over its budget already (a cache that shrank): only evictions make room.
    expect(roomToMake({ ...base, heldBytes: 130, entries }).bytes).toBe(30);
  });

  it("planRoom names what is needed by its label", () => {
    const plan = planRoom({ ...base, heldBytes: 100, needBytes: 10, needLabel: "bytes unpacked (the bundle's size on disk)" });
    expect(plan).toEqual({ t: "no-room", reason: "10 bytes unpacked (the bundle's size on disk); a disk budget of 100 bytes with 100 held, 1000 free on the file system; evicting every file no backend uses would free 0 (0 in use)" });
  });
});
