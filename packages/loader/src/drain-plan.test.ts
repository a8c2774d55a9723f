import { describe, expect, it } from "vitest";
import { decideDrainStep, maxReplaceAttempts, type DrainStepView } from "./drain-plan.js";

const base: DrainStepView = { min: 2, max: 2, readyOthers: 1, countedElsewhere: 1, loadInFlight: false, breakerAllows: true, noRoom: undefined, attempts: 0, deferrals: 0, maxDeferrals: 30 };
const step = (p: Partial<DrainStepView>) => decideDrainStep({ ...base, ...p });

describe("decideDrainStep (drain moves replicas one at a time)", () => {
  it("stops the drained replica at once when the others keep min (a replica above min, or a replacement now ready)", () => {
    expect(step({ readyOthers: 2 })).toEqual({ t: "stop", why: "floor-kept" });
    expect(step({ min: 0, readyOthers: 0 })).toEqual({ t: "stop", why: "floor-kept" });
    // Even with no room and the breaker open: nothing to keep.
    expect(step({ readyOthers: 3, breakerAllows: false, noRoom: "none" })).toEqual({ t: "stop", why: "floor-kept" });
  });

  it("starts a replacement when stopping would go below min and room exists", () => {
    expect(step({})).toEqual({ t: "replace" });
    expect(step({ min: 3, max: 4, readyOthers: 2, countedElsewhere: 3, attempts: maxReplaceAttempts - 1 })).toEqual({ t: "replace" });
  });

  it("waits for a load of the model in flight (one move at a time per model)", () => {
    expect(step({ loadInFlight: true })).toEqual({ t: "wait" });
    expect(step({ loadInFlight: true, noRoom: "none", breakerAllows: false })).toEqual({ t: "wait" });
  });

  it("falls back to stopping, saying why, when no room exists: max reached off draining nodes, breaker open, no node, attempts spent", () => {
    expect(step({ countedElsewhere: 2 })).toMatchObject({ t: "stop", why: "no-room", detail: expect.stringContaining("max 2") as unknown });
    expect(step({ breakerAllows: false })).toMatchObject({ t: "stop", why: "no-room", detail: expect.stringContaining("breaker") as unknown });
    expect(step({ noRoom: "no node has room" })).toEqual({ t: "stop", why: "no-room", detail: "no node has room" });
    expect(step({ attempts: maxReplaceAttempts })).toMatchObject({ t: "stop", why: "no-room" });
    expect(step({ deferrals: 29 })).toEqual({ t: "replace" });
    expect(step({ deferrals: 30 })).toMatchObject({ t: "stop", why: "no-room", detail: expect.stringContaining("deferred") as unknown });
  });
});
