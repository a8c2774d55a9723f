import { describe, expect, it } from "vitest";
import { gcBetween, gcTotalsOf } from "./swarm-gc.js";

const series = (kind: string, count: number, seconds: number): string =>
  `warden_coordinator_nodejs_gc_duration_seconds_sum{kind="${kind}"} ${String(seconds)}\nwarden_coordinator_nodejs_gc_duration_seconds_count{kind="${kind}"} ${String(count)}\n`;

describe("gcTotalsOf", () => {
  it("reads both kinds", () => {
    expect(gcTotalsOf(series("minor", 10, 0.5) + series("major", 2, 0.25))).toEqual({ minor: { count: 10, seconds: 0.5 }, major: { count: 2, seconds: 0.25 } });
  });

  it("counts no major series as no major collection, so a window with its first one is not NaN", () => {
    const before = gcTotalsOf(series("minor", 10, 0.5));
    const after = gcTotalsOf(series("minor", 30, 1.5) + series("major", 1, 0.25));
    expect(before?.major).toEqual({ count: 0, seconds: 0 });
    expect(gcBetween(before, after)).toEqual({ minor: { count: 20, seconds: 1 }, major: { count: 1, seconds: 0.25 } });
  });

  it("is undefined without the gc histogram", () => {
    expect(gcTotalsOf("other_metric 1\n")).toBeUndefined();
  });
});
