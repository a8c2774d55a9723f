import { describe, expect, it } from "vitest";
import { ManualClock } from "@warden/common";
import { createRepeatLimiter } from "./repeat-limiter.js";

describe("createRepeatLimiter", () => {
  it("logs a new reason at once, the same reason at most every everyMs with the repeats in between", () => {
    const clock = new ManualClock();
    const l = createRepeatLimiter(clock, 60_000);
    expect(l.admit("refused")).toEqual({ log: true, suppressed: 0 });
    clock.advance(1_000);
    expect(l.admit("refused").log).toBe(false);
    expect(l.admit("refused").log).toBe(false);
    clock.advance(59_000);
    expect(l.admit("refused")).toEqual({ log: true, suppressed: 2 });
    expect(l.admit("auth violation")).toEqual({ log: true, suppressed: 0 });
    expect(l.admit("auth violation").log).toBe(false);
    l.reset();
    expect(l.admit("auth violation")).toEqual({ log: true, suppressed: 0 });
  });
});
