import { describe, expect, it } from "vitest";
import { LoadCooldown, defaultCooldownPolicy } from "./load-cooldown.js";

describe("LoadCooldown", () => {
  it("doubles on each consecutive failure from the base up to the cap (10, 20, 40 … 300 s by default)", () => {
    const c = new LoadCooldown(defaultCooldownPolicy);
    const seq = Array.from({ length: 8 }, (_, i) => c.recordFailure("m", i * 1_000_000));
    expect(seq).toEqual([10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
  });

  it("reports the remaining wait and 0 once it has run out", () => {
    const c = new LoadCooldown({ baseMs: 10, maxMs: 100 });
    c.recordFailure("m", 1_000);
    expect(c.retryAfterMs("m", 1_000)).toBe(10);
    expect(c.retryAfterMs("m", 1_004)).toBe(6);
    expect(c.retryAfterMs("m", 1_010)).toBe(0);
    expect(c.retryAfterMs("other", 1_000)).toBe(0);
  });

  it("keeps the count across an expired cooldown: the next failure doubles again", () => {
    const c = new LoadCooldown({ baseMs: 10, maxMs: 100 });
    c.recordFailure("m", 0);
    expect(c.retryAfterMs("m", 50)).toBe(0);
    expect(c.recordFailure("m", 50)).toBe(20);
    expect(c.retryAfterMs("m", 50)).toBe(20);
  });

  it("a success clears the failure state: the next failure starts at the base", () => {
    const c = new LoadCooldown({ baseMs: 10, maxMs: 100 });
    c.recordFailure("m", 0);
    c.recordFailure("m", 0);
    c.recordSuccess("m");
    expect(c.retryAfterMs("m", 0)).toBe(0);
    expect(c.recordFailure("m", 0)).toBe(10);
  });

  it("is disabled with base 0: failures never cool a model down", () => {
    const c = new LoadCooldown({ baseMs: 0, maxMs: 100 });
    expect(c.recordFailure("m", 0)).toBe(0);
    expect(c.recordFailure("m", 0)).toBe(0);
    expect(c.retryAfterMs("m", 0)).toBe(0);
  });

  it("setPolicy normalises: a negative base disables, a max below the base is raised to it", () => {
    const c = new LoadCooldown();
    c.setPolicy({ baseMs: -5, maxMs: 10 });
    expect(c.recordFailure("m", 0)).toBe(0);
    c.setPolicy({ baseMs: 50, maxMs: 10 });
    expect(c.recordFailure("n", 0)).toBe(50);
    expect(c.recordFailure("n", 0)).toBe(50);
  });

  it("models are independent and forget drops a model's state", () => {
    const c = new LoadCooldown({ baseMs: 10, maxMs: 100 });
    c.recordFailure("a", 0);
    expect(c.retryAfterMs("b", 0)).toBe(0);
    c.forget("a");
    expect(c.retryAfterMs("a", 0)).toBe(0);
  });
});
