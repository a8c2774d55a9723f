import { describe, expect, it } from "vitest";
import { progressLine } from "./progress-line.js";

describe("progressLine", () => {
  it("says the elapsed time in whole seconds, never in ms, even when the timer fired a little early", () => {
    expect(progressLine("waiting for m", 996, "")).toBe("waiting for m … 1s");
    expect(progressLine("waiting for m", 1_004, "")).toBe("waiting for m … 1s");
    expect(progressLine("waiting for m", 1_997, "")).toBe("waiting for m … 2s");
    expect(progressLine("loading m", 61_000, "")).toBe("loading m … 1m1s");
    expect(progressLine("loading m", 0, "")).toBe("loading m … 1s");
  });

  it("appends the reason in parentheses when there is one", () => {
    expect(progressLine("draining n1", 3_000, "2 instances left")).toBe("draining n1 … 3s (2 instances left)");
  });
});
