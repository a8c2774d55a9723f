import { describe, expect, it } from "vitest";
import { decideReplicas, type ReplicaView } from "./replica-reconciler.js";
import { ScaleBreakers } from "./scale-breaker.js";

const base: ReplicaView = { min: 0, max: 4, stopping: 0, scaleDownAfterMs: 1_000, live: 0, ready: 0, loadInFlight: false, breakerAllows: true, idle: [], nowMs: 10_000 };

describe("decideReplicas", () => {
  it("restores min one load at a time, not while a load is in flight or the breaker is open", () => {
    expect(decideReplicas({ ...base, min: 2, live: 1, ready: 1 })).toEqual({ t: "load" });
    expect(decideReplicas({ ...base, min: 2, live: 1, loadInFlight: true })).toEqual({ t: "none" });
    expect(decideReplicas({ ...base, min: 2, live: 1, breakerAllows: false })).toEqual({ t: "none" });
    expect(decideReplicas({ ...base, min: 2, live: 2, ready: 2 })).toEqual({ t: "none" });
    // one being stopped could come back (row 3): wait for its settle rather than pass max
    expect(decideReplicas({ ...base, min: 2, max: 2, live: 1, stopping: 1 })).toEqual({ t: "none" });
    expect(decideReplicas({ ...base, min: 2, max: 3, live: 1, stopping: 1 })).toEqual({ t: "load" });
  });

  it("scales down the replica idle longest, only above max(min, 1) and after scaleDownAfterMs", () => {
    const idle = [
      { incarnation: "a", idleSinceMs: 8_000 },
      { incarnation: "b", idleSinceMs: 5_000 },
      { incarnation: "c", idleSinceMs: 9_500 },
    ];
    expect(decideReplicas({ ...base, live: 3, ready: 3, idle })).toEqual({ t: "scale-down", incarnation: "b" });
    expect(decideReplicas({ ...base, live: 1, ready: 1, idle: idle.slice(1, 2) })).toEqual({ t: "none" }); // the last one is the idle watchdog's
    expect(decideReplicas({ ...base, min: 3, live: 3, ready: 3, idle })).toEqual({ t: "none" });
    expect(decideReplicas({ ...base, live: 2, ready: 2, idle: idle.slice(2) })).toEqual({ t: "none" }); // idle only 500 ms
  });
});

describe("ScaleBreakers", () => {
  it("opens on failure, doubles from 10 s to a 5 min cap, and closes on success", () => {
    const b = new ScaleBreakers();
    expect(b.allows("m", 0)).toBe(true);
    const waits = [1, 2, 3, 4, 5, 6, 7, 8].map(() => b.fail("m", "no node fits", 0).retryAfterMs);
    expect(waits).toEqual([10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
    expect(b.allows("m", 299_999)).toBe(false);
    expect(b.allows("m", 300_000)).toBe(true);
    expect(b.allows("other", 0)).toBe(true);
    expect(b.state("m")).toMatchObject({ failures: 8, error: "no node fits" });
    b.close("m");
    expect(b.state("m")).toBeUndefined();
    expect(b.fail("m", "x", 0).retryAfterMs).toBe(10_000);
  });
});
