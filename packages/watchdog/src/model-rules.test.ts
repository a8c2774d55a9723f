import { Code } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createFixture } from "./watchdog-fixture.js";

describe("per-model idle rules (replica floor, idle timeout)", () => {
  it("the idle check never takes a model below its replica floor; other models go as before", () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 100 });
    f.core.setModelRules(new Map([["m", { minReplicas: 2, idleTimeoutMs: undefined }]]));
    for (const a of ["a1", "a2", "a3"]) {
      f.reg(a, "m");
      f.idle(a);
    }
    f.reg("b1", "other");
    f.idle("b1");
    f.clock.advance(1_000);
    const stops = f.core.tick().stops;
    expect(stops.map((s) => s.model).sort()).toEqual(["m", "other"]);
    expect(stops.every((s) => s.reason === "idle")).toBe(true);
    f.clock.advance(1_000);
    expect(f.core.tick().stops).toEqual([]); // 2 ready left = the floor (the pending one does not count)
  });

  it("the floor does not hold back LRU eviction", () => {
    const f = createFixture({ limitPerNode: 2 });
    f.core.setModelRules(new Map([["m", { minReplicas: 2, idleTimeoutMs: undefined }]]));
    f.reg("a1", "m");
    f.reg("a2", "m");
    const d = f.core.enforceLimit("n1", "x");
    expect(d.stops.map((s) => [s.model, s.reason])).toEqual([["m", "lru"]]);
  });

  it("a model's idle timeout replaces the policy's: 0 never, a positive one even with the idle check off", () => {
    const f = createFixture({ idleCheck: false, idleTimeoutMs: 100 });
    f.core.setModelRules(
      new Map([
        ["never", { minReplicas: 0, idleTimeoutMs: 0 }],
        ["ttl", { minReplicas: 0, idleTimeoutMs: 5_000 }],
      ]),
    );
    for (const [a, m] of [["a1", "never"], ["a2", "ttl"], ["a3", "policy"]] as const) {
      f.reg(a, m);
      f.idle(a);
    }
    f.clock.advance(4_000);
    expect(f.core.tick().stops).toEqual([]);
    f.clock.advance(2_000);
    expect(f.core.tick().stops.map((s) => s.model)).toEqual(["ttl"]);
    f.core.updatePolicy({ idleCheck: true });
    f.clock.advance(1_000_000);
    expect(f.core.tick().stops.map((s) => s.model)).toEqual(["policy"]);
  });

  it("rejected rules name the field and change nothing", () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 100 });
    f.core.setModelRules(new Map([["m", { minReplicas: 1, idleTimeoutMs: undefined }]]));
    for (const bad of [{ minReplicas: -1, idleTimeoutMs: undefined }, { minReplicas: 0, idleTimeoutMs: -5 }, { minReplicas: 0.5, idleTimeoutMs: undefined }]) {
      expect(() => {
        f.core.setModelRules(new Map([["m", bad]]));
      }).toThrow(expect.objectContaining({ code: Code.InvalidArgument }) as Error);
    }
    f.reg("a1", "m");
    f.idle("a1");
    f.clock.advance(1_000);
    expect(f.core.tick().stops).toEqual([]); // the floor of 1 still holds
  });
});
