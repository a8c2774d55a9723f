import { Code, WardenError, isWardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { retryEnforcement } from "./retry-enforcement.js";
import { enforceLimit } from "./localai-enforce.js";
import { createFixture, flush, type Fixture } from "./watchdog-fixture.js";

// localai-semantics §6, scenarios 1–44 and 71–80. LocalAI's `Enforce(n)` maps
// to n loading instances already registered on the node (its pendingLoads).

const MB = 1024 * 1024;

describe("size-aware", () => {
  it("scenario 35: the larger newer model goes before the smaller older one", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true, sizeAware: true });
    f.reg("a1", "m1", { sizeBytes: 100 * MB });
    f.reg("a2", "m2", { sizeBytes: 400 * MB });
    await enforceLimit(f);
    expect(f.port.models()).toEqual(["m2"]);
  });

  it("scenario 36: equal sizes fall back to the older one", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true, sizeAware: true });
    f.reg("a1", "m1", { sizeBytes: 200 * MB });
    f.reg("a2", "m2", { sizeBytes: 200 * MB });
    await enforceLimit(f);
    expect(f.port.models()).toEqual(["m1"]);
  });

  it("scenario 37: no sizes known is plain LRU", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true, sizeAware: true });
    f.reg("a1", "m1");
    f.reg("a2", "m2");
    await enforceLimit(f);
    expect(f.port.models()).toEqual(["m1"]);
  });
});

describe("options", () => {
  it("scenario 39 (Warden differs: threshold default 0.95; interval 0 is rejected, not silently ignored): defaults, last limit wins, interval stays 500 ms", () => {
    const f = createFixture();
    const p = f.core.getPolicy();
    expect(p).toMatchObject({
      limitPerNode: 0,
      memoryReclaimer: false,
      memoryThreshold: 0.95,
      memoryReleaseThreshold: 0.9,
      busyTimeoutMs: 5 * 60_000,
      idleTimeoutMs: 15 * 60_000,
      tickIntervalMs: 500,
      forceEvictionWhenBusy: false,
    });
    f.core.updatePolicy({ limitPerNode: 3 });
    f.core.updatePolicy({ limitPerNode: 7 });
    expect(f.core.getPolicy().limitPerNode).toBe(7);
    let err: unknown;
    try {
      f.core.updatePolicy({ tickIntervalMs: 0 });
    } catch (e) {
      err = e;
    }
    expect(isWardenError(err, Code.InvalidArgument)).toBe(true);
    expect((err as WardenError).details.field).toBe("tickIntervalMs");
    expect(f.core.getPolicy().tickIntervalMs).toBe(500);
  });

  it("scenario 40: reclaimer settings read back exactly, together or field by field", () => {
    const f = createFixture({ memoryReclaimer: true, memoryThreshold: 0.85 });
    expect(f.core.getPolicy()).toMatchObject({ memoryReclaimer: true, memoryThreshold: 0.85 });
    f.core.updatePolicy({ memoryReclaimer: false });
    f.core.updatePolicy({ memoryReclaimer: true });
    f.core.updatePolicy({ memoryThreshold: 0.9 });
    expect(f.core.getPolicy()).toMatchObject({ memoryReclaimer: true, memoryThreshold: 0.9 });
    f.core.updatePolicy({ memoryReclaimer: true, memoryThreshold: 0.8 });
    expect(f.core.getPolicy()).toMatchObject({ memoryReclaimer: true, memoryThreshold: 0.8 });
  });
});

describe("retry loop", () => {
  function counter(needMoreTimes: number): { fn: () => Promise<{ needMore: boolean }>; calls: () => number } {
    let n = 0;
    return {
      fn: () => Promise.resolve({ needMore: n++ < needMoreTimes }),
      calls: () => n,
    };
  }
  const sleeps: number[] = [];
  const sleep = (ms: number): Promise<void> => {
    sleeps.push(ms);
    return Promise.resolve();
  };

  it("scenario 41: satisfied at once: called once", async () => {
    const c = counter(0);
    expect((await retryEnforcement(c.fn, { maxAttempts: 5, sleep })).attempts).toBe(1);
    expect(c.calls()).toBe(1);
  });

  it("scenario 42: need-more twice then satisfied: called three times, sleeping between", async () => {
    sleeps.length = 0;
    const c = counter(2);
    await retryEnforcement(c.fn, { maxAttempts: 30, intervalMs: 1000, sleep });
    expect(c.calls()).toBe(3);
    expect(sleeps).toEqual([1000, 1000]);
  });

  it("scenario 43: always need-more with max 4: called four times, no sleep after the last", async () => {
    sleeps.length = 0;
    const c = counter(100);
    const r = await retryEnforcement(c.fn, { maxAttempts: 4, intervalMs: 7, sleep });
    expect(c.calls()).toBe(4);
    expect(r.last.needMore).toBe(true);
    expect(sleeps).toHaveLength(3);
  });

  it("scenario 44 (Warden differs: max 0 is rejected with INVALID_ARGUMENT instead of silently disabling enforcement): fn is never called", async () => {
    const c = counter(0);
    await expect(retryEnforcement(c.fn, { maxAttempts: 0, sleep })).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument));
    expect(c.calls()).toBe(0);
  });
});

describe("PR regression and behaviour (force on, limit 1, failing force stop with a hook)", () => {
  function failing(f: Fixture): void {
    f.port.outcome = () => ({ t: "failed", message: "stop failed", freed: false });
  }

  it("scenario 71: a request finishing during the failing stop is not brought back", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    const r1 = f.core.trackRequest("a1");
    failing(f);
    f.port.hook = () => {
      r1();
    };
    expect(await enforceLimit(f)).toMatchObject({ evicted: 0, needMore: true });
    expect(f.port.calls[0]?.force).toBe(true);
    expect(f.core.inFlight("a1")).toBe(0);
    expect(f.core.requestState("a1")?.busySinceMs).toBeUndefined();
    expect(f.core.instanceAt("a1")?.model).toBe("m1");
  });

  it("scenario 72: a request starting during the failing stop is kept and keeps the address busy", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    const r1 = f.core.trackRequest("a1");
    failing(f);
    let r2: (() => void) | undefined;
    let r2Start = 0;
    f.port.hook = () => {
      f.clock.advance(5);
      r2Start = f.clock.now();
      r2 = f.core.trackRequest("a1");
    };
    await enforceLimit(f);
    expect(f.core.instanceAt("a1")?.model).toBe("m1");
    r1();
    expect(f.core.inFlight("a1")).toBe(1);
    expect(f.core.requestState("a1")?.busySinceMs).toBe(r2Start);
    r2?.();
    expect(f.core.requestState("a1")?.idleSinceMs).toBeDefined();
    expect(f.core.inFlight("a1")).toBe(0);
  });

  it("scenario 73: a failing stop after the loader dropped the model leaves no registration and no request state", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.core.trackRequest("a1");
    failing(f);
    f.loader.holdsByDefault = false;
    await enforceLimit(f);
    expect(f.core.instanceAt("a1")).toBeUndefined();
    expect(f.core.requestState("a1")).toBeUndefined();
    expect(f.settles[0]?.result).toMatchObject({ row: 4, terminalReason: "instance-dropped" });
  });

  it("scenario 74: a not-found stop counts as evicted, no need-more, no state left", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.idle("a1");
    f.port.stop = (c) => {
      f.port.calls.push(c);
      return Promise.reject(new WardenError(Code.NotFound, "model not found"));
    };
    expect(await enforceLimit(f)).toMatchObject({ evicted: 1, needMore: false });
    expect(f.core.requestState("a1")).toBeUndefined();
    expect(f.core.instanceAt("a1")).toBeUndefined();
  });

  it("scenario 77: a failed idle stop of a model the loader still holds is retried on the next tick", async () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 10 });
    f.reg("a1", "m1");
    f.idle("a1");
    failing(f);
    f.clock.advance(20);
    f.svc.tick();
    await flush();
    expect(f.port.calls).toHaveLength(1);
    f.clock.advance(20);
    f.svc.tick();
    await flush();
    expect(f.port.calls.map((c) => [c.model, c.force])).toEqual([
      ["m1", false],
      ["m1", false],
    ]);
  });

  it("scenario 78: a failed busy-killer stop is retried with force on the next tick", async () => {
    const f = createFixture({ busyCheck: true, busyTimeoutMs: 10 });
    f.reg("a1", "m1");
    f.busy("a1");
    failing(f);
    f.clock.advance(20);
    f.svc.tick();
    await flush();
    f.clock.advance(20);
    f.svc.tick();
    await flush();
    expect(f.port.calls.map((c) => [c.model, c.force])).toEqual([
      ["m1", true],
      ["m1", true],
    ]);
  });

  it("scenario 79: a failed group stop gives {0,true} and the conflict is seen again", async () => {
    const f = createFixture({ modelGroups: { a: ["heavy"], b: ["heavy"] } });
    f.reg("a1", "a");
    f.idle("a1");
    failing(f);
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: true });
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: true });
    expect(f.port.calls).toHaveLength(2);
  });

  it("scenario 80 (Warden differs: the reclaimer detaches before stopping): a failed reclaimer stop untracks a dropped model and keeps a held one", async () => {
    for (const holds of [false, true]) {
      const f = createFixture({ memoryReclaimer: true });
      f.reg("a1", "m1", { gpu: 0 });
      f.idle("a1");
      failing(f);
      f.loader.holdsByDefault = holds;
      f.core.reportMemory("n1", { gpus: [{ index: 0, totalBytes: 100, usedBytes: 99 }] });
      const { decision } = f.svc.tick();
      expect(decision.stops.map((s) => s.reason)).toEqual(["memory"]);
      await flush();
      expect(f.core.instanceAt("a1") !== undefined).toBe(holds);
      expect(f.core.requestState("a1") !== undefined).toBe(holds);
    }
  });
});
