import { describe, expect, it } from "vitest";
import { enforceLimit } from "./localai-enforce.js";
import { createFixture, flush } from "./watchdog-fixture.js";

// localai-semantics §6, scenarios 1–44 and 71–80. LocalAI's `Enforce(n)` maps
// to n loading instances already registered on the node (its pendingLoads).

describe("request lifecycle", () => {
  it("scenario 1: two marks and one unmark leave one in flight, busy since the first mark; the second unmark makes it idle", () => {
    const f = createFixture();
    f.reg("a1", "m1");
    const t0 = f.clock.now();
    f.core.mark("a1");
    f.clock.advance(5);
    f.core.mark("a1");
    f.core.unmark("a1");
    let s = f.core.requestState("a1");
    expect(s?.inFlight).toBe(1);
    expect(s?.busySinceMs).toBe(t0);
    expect(s?.idleSinceMs).toBeUndefined();
    f.clock.advance(5);
    f.core.unmark("a1");
    s = f.core.requestState("a1");
    expect(s?.inFlight).toBe(0);
    expect(s?.busySinceMs).toBeUndefined();
    expect(s?.idleSinceMs).toBe(f.clock.now());
  });

  it("scenario 2: busy-since follows the oldest live request, not the first of the burst", () => {
    const f = createFixture();
    const r1Start = f.clock.now();
    const r1 = f.core.trackRequest("a1");
    f.clock.advance(10);
    const r2Start = f.clock.now();
    const r2 = f.core.trackRequest("a1");
    r1();
    expect(f.core.inFlight("a1")).toBe(1);
    expect(f.core.requestState("a1")?.busySinceMs).toBe(r2Start);
    expect(r2Start).toBeGreaterThan(r1Start);
    r2();
    const s = f.core.requestState("a1");
    expect(s?.inFlight).toBe(0);
    expect(s?.busySinceMs).toBeUndefined();
    expect(s?.idleSinceMs).toBeDefined();
  });

  it("scenario 3: calling a completion again changes nothing", () => {
    const f = createFixture();
    const done = f.core.trackRequest("a1");
    f.core.trackRequest("a1");
    done();
    f.clock.advance(50);
    const before = f.core.requestState("a1");
    done();
    expect(f.core.requestState("a1")).toEqual(before);
    expect(before?.inFlight).toBe(1);
  });

  it("scenario 4: unmark with no open legacy request changes nothing", () => {
    const f = createFixture();
    const done = f.core.trackRequest("a1");
    const before = f.core.requestState("a1");
    f.clock.advance(5);
    f.core.unmark("a1");
    f.core.unmark("a2");
    expect(f.core.requestState("a1")).toEqual(before);
    expect(f.core.requestState("a2")).toBeUndefined();
    done();
  });

  it("scenario 5: the loaded count goes 0 → 1 → 2 as instances register", () => {
    const f = createFixture();
    expect(f.core.loadedCount()).toBe(0);
    f.reg("a1", "m1");
    expect(f.core.loadedCount()).toBe(1);
    f.reg("a2", "m2");
    expect(f.core.loadedCount()).toBe(2);
  });
});

describe("limit (LRU) per node", () => {
  it("scenario 6: under the limit nothing is evicted", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.idle("a1");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 0, needMore: false });
    expect(f.port.calls).toHaveLength(0);
  });

  it("scenario 7: at the limit the least recently used goes", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.idle("a1");
    f.reg("a2", "m2");
    f.idle("a2");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 1, needMore: false });
    expect(f.port.models()).toEqual(["m1"]);
  });

  it("scenario 8: limit 1 with three idle models evicts all three", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    for (const i of [1, 2, 3]) {
      f.reg(`a${i}`, `m${i}`);
      f.idle(`a${i}`);
    }
    expect(await enforceLimit(f)).toMatchObject({ evicted: 3 });
    expect(f.port.models()).toEqual(["m1", "m2", "m3"]);
  });

  it("scenario 9: limit 2, two idle and one loading instance: both idle ones go, need-more false", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.idle("a1");
    f.reg("a2", "m2");
    f.idle("a2");
    expect(await enforceLimit(f, 1)).toMatchObject({ evicted: 2, needMore: false });
  });

  it("scenario 10: limit 0 is unlimited", async () => {
    const f = createFixture({ limitPerNode: 0 });
    for (const i of [1, 2, 3]) f.reg(`a${i}`, `m${i}`);
    expect(await enforceLimit(f)).toMatchObject({ evicted: 0, needMore: false });
    expect(f.port.calls).toHaveLength(0);
  });

  it("scenario 12: limit 1 with one idle model evicts it", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.idle("a1");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 1 });
    expect(f.port.models()).toEqual(["m1"]);
  });

  it("scenario 13: register, use, enforce five times gives exactly five stops", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    for (let i = 0; i < 5; i++) {
      f.reg("addr", "model");
      f.idle("addr");
      await enforceLimit(f);
    }
    expect(f.port.calls).toHaveLength(5);
  });

  it("scenario 14: force off skips the busy oldest and evicts the idle one", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: false });
    f.reg("a1", "m1");
    f.busy("a1");
    f.reg("a2", "m2");
    f.idle("a2");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 1, needMore: false });
    expect(f.port.models()).toEqual(["m2"]);
  });

  it("scenario 15: force on evicts the busy oldest through the force path", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    f.busy("a1");
    f.reg("a2", "m2");
    f.busy("a2");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 1, needMore: false });
    expect(f.port.calls.map((c) => [c.model, c.force])).toEqual([["m1", true]]);
  });

  it("scenario 16: force off with everything busy sets need-more and stops nothing", async () => {
    const f = createFixture({ limitPerNode: 2 });
    f.reg("a1", "m1");
    f.busy("a1");
    f.reg("a2", "m2");
    f.busy("a2");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 0, needMore: true });
    expect(f.port.calls).toHaveLength(0);
  });

  it("scenario 18: one busy and two idle, limit 2: both idle ones go", async () => {
    const f = createFixture({ limitPerNode: 2 });
    f.reg("a1", "m1");
    f.busy("a1");
    f.reg("a2", "m2");
    f.idle("a2");
    f.reg("a3", "m3");
    f.idle("a3");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 2, needMore: false });
    expect(f.port.models()).toEqual(["m2", "m3"]);
  });

  it("scenario 20: defaults, two busy, limit set live to 1: need-more", async () => {
    const f = createFixture();
    f.reg("a1", "m1");
    f.busy("a1");
    f.reg("a2", "m2");
    f.busy("a2");
    f.core.updatePolicy({ limitPerNode: 1 });
    expect((await enforceLimit(f)).needMore).toBe(true);
  });
});

describe("pins, idle and busy", () => {
  it("scenario 21: the pin set is replaced wholesale", () => {
    const f = createFixture();
    f.core.updatePolicy({ pinnedModels: ["m1", "m2"] });
    expect([f.core.isPinned("m1"), f.core.isPinned("m2"), f.core.isPinned("m3")]).toEqual([true, true, false]);
    f.core.updatePolicy({ pinnedModels: ["m2"] });
    expect([f.core.isPinned("m1"), f.core.isPinned("m2")]).toEqual([false, true]);
  });

  it("scenario 22: a pinned oldest model is skipped; the next one goes", async () => {
    const f = createFixture({ limitPerNode: 2, forceEvictionWhenBusy: true, pinnedModels: ["m1"] });
    f.reg("a1", "m1");
    f.idle("a1");
    f.reg("a2", "m2");
    f.idle("a2");
    expect(await enforceLimit(f)).toMatchObject({ evicted: 1 });
    expect(f.port.models()).toEqual(["m2"]);
  });

  it("scenario 24: the idle check stops the unpinned idle model gracefully and never the pinned one", async () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 10, tickIntervalMs: 50, pinnedModels: ["m1"] });
    f.reg("a1", "m1");
    f.idle("a1");
    f.reg("a2", "m2");
    f.idle("a2");
    for (let t = 0; t < 200; t += 50) {
      f.clock.advance(50);
      f.svc.tick();
      await flush();
    }
    expect(f.port.calls.map((c) => [c.model, c.force, c.reason])).toEqual([["m2", false, "idle"]]);
  });

  it("scenario 25: the busy-killer force-stops a stuck model, never gracefully", async () => {
    const f = createFixture({ busyCheck: true, busyTimeoutMs: 10, tickIntervalMs: 20 });
    f.reg("a1", "stuck");
    f.busy("a1");
    for (let t = 0; t < 300 && f.port.calls.length === 0; t += 20) {
      f.clock.advance(20);
      f.svc.tick();
      await flush();
    }
    expect(f.port.calls.map((c) => [c.model, c.force, c.reason])).toEqual([["stuck", true, "busy"]]);
  });
});

describe("groups per node", () => {
  it("scenario 26: group lists are stored, replaced wholesale, cleared, and returned as copies", () => {
    const f = createFixture();
    expect(f.core.modelGroups("unknown")).toBeUndefined();
    f.core.updatePolicy({ modelGroups: { a: ["x", "y"], b: ["z"] } });
    expect(f.core.modelGroups("a")).toEqual(["x", "y"]);
    f.core.updatePolicy({ modelGroups: { b: ["w"] } });
    expect(f.core.modelGroups("a")).toBeUndefined();
    expect(f.core.modelGroups("b")).toEqual(["w"]);
    const copy = f.core.modelGroups("b");
    copy?.push("mutated");
    expect(f.core.modelGroups("b")).toEqual(["w"]);
    f.core.updatePolicy({ modelGroups: {} });
    expect(f.core.modelGroups("b")).toBeUndefined();
  });

  it("scenario 27: a requested model with no groups gives {0,false} and no calls", async () => {
    const f = createFixture({ modelGroups: { a: ["heavy"] } });
    f.reg("a1", "a");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: false });
    expect(f.port.calls).toHaveLength(0);
  });

  it("scenario 28: disjoint groups do not conflict", async () => {
    const f = createFixture({ modelGroups: { a: ["vision"], b: ["heavy"] } });
    f.reg("a1", "a");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: false });
  });

  it("scenario 29: an idle conflict in the same group is evicted", async () => {
    const f = createFixture({ modelGroups: { a: ["heavy"], b: ["heavy"] } });
    f.reg("a1", "a");
    f.idle("a1");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 1, needMore: false });
    expect(f.port.models()).toEqual(["a"]);
  });

  it("scenario 30: sharing one of several groups is a conflict", async () => {
    const f = createFixture({ modelGroups: { a: ["x", "y"], b: ["y", "z"] } });
    f.reg("a1", "a");
    f.idle("a1");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 1 });
    expect(f.port.models()).toEqual(["a"]);
  });

  it("scenario 31: every conflict goes", async () => {
    const f = createFixture({ forceEvictionWhenBusy: true, modelGroups: { a: ["heavy"], b: ["heavy"], c: ["heavy"] } });
    f.reg("a1", "a");
    f.idle("a1");
    f.reg("a2", "b");
    f.idle("a2");
    expect(await f.svc.enforceGroups("n1", "c")).toMatchObject({ evicted: 2 });
    expect(new Set(f.port.models())).toEqual(new Set(["a", "b"]));
  });

  it("scenario 32: a pinned conflict gives {0,true} with no calls", async () => {
    const f = createFixture({ forceEvictionWhenBusy: true, pinnedModels: ["a"], modelGroups: { a: ["heavy"], b: ["heavy"] } });
    f.reg("a1", "a");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: true });
    expect(f.port.calls).toHaveLength(0);
  });

  it("scenario 33: a busy conflict with force off gives {0,true} with no calls", async () => {
    const f = createFixture({ modelGroups: { a: ["heavy"], b: ["heavy"] } });
    f.reg("a1", "a");
    f.busy("a1");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: true });
    expect(f.port.calls).toHaveLength(0);
  });

  it("scenario 34: a busy conflict with force on is stopped through the force path", async () => {
    const f = createFixture({ forceEvictionWhenBusy: true, modelGroups: { a: ["heavy"], b: ["heavy"] } });
    f.reg("a1", "a");
    f.busy("a1");
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 1, needMore: false });
    expect(f.port.calls.map((c) => c.force)).toEqual([true]);
  });
});
