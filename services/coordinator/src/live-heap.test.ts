import { setFlagsFromString, getHeapStatistics } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { liveHeapBytes } from "./live-heap.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const allocate = (): number[][] => Array.from({ length: 150 }, () => Array.from({ length: 10_000 }, (_, i) => i + 0.5));

describe("liveHeapBytes", () => {
  it("is the heap after the last major collection, not what was allocated since", async () => {
    liveHeapBytes();
    gc();
    // The observer hears of the collection after this turn.
    await new Promise((r) => setTimeout(r, 50));
    const live = liveHeapBytes();
    expect(live).toBeGreaterThan(0);
    // 150 × 10 000 doubles, about 11 MiB, allocated after the collection: in the heap now, not in the live figure.
    const held = allocate();
    expect(getHeapStatistics().used_heap_size - liveHeapBytes()).toBeGreaterThan(8 * 2 ** 20);
    expect(liveHeapBytes()).toBe(live);
    expect(held.length).toBe(150);
  });
});
