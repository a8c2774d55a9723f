import { Code, ManualClock, WardenError, isWardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createWatchdogCore } from "./watchdog-core.js";
import { createFixture, flush, type Fixture } from "./watchdog-fixture.js";
import { checkSnapshotInvariants, groupConflicts } from "./watchdog-snapshot.js";

function errorOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
}

function expectInvalid(fn: () => unknown, field: string): void {
  const e = errorOf(fn);
  expect(isWardenError(e, Code.InvalidArgument), String(e)).toBe(true);
  expect((e as WardenError).details.field).toBe(field);
}

function failing(f: Fixture, freed = false): void {
  f.port.outcome = () => ({ t: "failed", message: "deadline exceeded", code: Code.DeadlineExceeded, freed });
}

describe("the two sequences that broke LocalAI's first version (force on, limit 1, hook inside a failing force stop)", () => {
  it("(a) a request completing during the stop is not resurrected: no in-flight or busy entry afterwards", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    const m1 = f.reg("a1", "m1");
    const r1 = f.core.trackRequest("a1");
    failing(f);
    f.port.hook = () => {
      r1();
    };
    const res = await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    expect(res).toMatchObject({ t: "waited", evicted: 0, needMore: true });
    expect(f.core.instance(m1)).toMatchObject({ state: "ready", inFlight: 0, busySinceMs: undefined, pendingEviction: undefined });
    expect(f.core.requestState("a1")?.idleSinceMs).toBeDefined();
  });

  it("(b) a request starting during the stop is kept: after the older one completes in-flight is 1 and it stays busy until the new one completes", async () => {
    const f = createFixture({ limitPerNode: 1, forceEvictionWhenBusy: true });
    f.reg("a1", "m1");
    const r1 = f.core.trackRequest("a1");
    failing(f);
    let r2: (() => void) | undefined;
    f.port.hook = () => {
      f.clock.advance(3);
      r2 = f.core.trackRequest("a1");
    };
    await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    r1();
    expect(f.core.inFlight("a1")).toBe(1);
    expect(f.core.requestState("a1")?.busySinceMs).toBeDefined();
    r2?.();
    expect(f.core.requestState("a1")).toMatchObject({ inFlight: 0, busySinceMs: undefined });
  });
});

describe("loading instances (DESIGN §3.4 item 2)", () => {
  it("with limit 1, m1 loading and m2 requested: nothing selected, need-more until m1 is ready; then m1 is evicted and m2 admitted", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "m1-1", address: "a1" });
    const first = await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    expect(first).toMatchObject({ t: "waited", evicted: 0, needMore: true });
    expect(f.port.calls).toHaveLength(0);
    expect(f.core.instance("m2-1")).toBeUndefined();
    f.core.markReady("m1-1");
    const second = await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    expect(second).toMatchObject({ t: "waited", evicted: 1, needMore: false });
    expect(f.port.models()).toEqual(["m1"]);
    const third = await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    expect(third.t).toBe("admitted");
    expect(f.core.instance("m2-1")?.state).toBe("reserved");
  });

  it("loading instances are never selected by the tick, and count as group conflicts", async () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 1, busyCheck: true, busyTimeoutMs: 1, modelGroups: { a: ["g"], b: ["g"] } });
    f.core.registerLoading({ nodeId: "n1", model: "a", incarnation: "a-1", address: "a1" });
    f.core.trackRequest("a1"); // LoadModel is tracked
    f.clock.advance(100);
    expect(f.svc.tick().decision.stops).toHaveLength(0);
    expect(await f.svc.enforceGroups("n1", "b")).toMatchObject({ evicted: 0, needMore: true });
  });

  it("an explicit stop of a loading instance that fails at the lock re-registers it loading; ready during the stop makes it ready", async () => {
    const f = createFixture();
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "m1-1", address: "a1" });
    f.port.manual = true;
    const stop = f.svc.stop("m1-1", { reason: "admin" });
    expect(f.port.calls[0]).toMatchObject({ detachedFrom: "loading", reason: "admin" });
    expect(f.core.markReady("m1-1")).toBe("pending");
    f.port.release("m1-1", { t: "failed", message: 'waiting to shut down model "m1": context deadline exceeded', code: Code.DeadlineExceeded, freed: false });
    const r = await stop;
    expect(r).toMatchObject({ t: "settled", report: { result: { row: 3, state: "ready" } } });
    expect(f.core.instanceAt("a1")?.state).toBe("ready");
  });

  it("a failed load removes the instance through the watchdog: no phantom", () => {
    const f = createFixture();
    f.core.admit({ nodeId: "n1", model: "m1", incarnation: "m1-1" });
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "m1-1", address: "a1" });
    f.core.trackRequest("a1");
    const r = f.core.remove("m1-1");
    expect(r.t).toBe("removed");
    expect(f.core.loadedCount()).toBe(0);
    expect(f.core.occupancy("n1").total).toBe(0);
    expect(f.core.requestState("a1")).toBeUndefined();
  });
});

describe("leftovers and orphans", () => {
  it("with limit 1 and one leftover: need-more and nothing admitted until the leftover is reported gone", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.core.setNodeOccupancy("n1", [{ kind: "leftover", key: "old-1", model: "m0", groups: [], sizeBytes: 10 }]);
    for (let i = 0; i < 3; i++) {
      expect(await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" })).toMatchObject({ t: "waited", needMore: true, evicted: 0 });
    }
    expect(f.core.instance("m2-1")).toBeUndefined();
    f.core.setNodeOccupancy("n1", []);
    expect((await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" })).t).toBe("admitted");
  });

  it("a leftover or orphan in a conflicting group blocks the same way", async () => {
    for (const kind of ["leftover", "orphan"] as const) {
      const f = createFixture({ modelGroups: { m2: ["heavy"] } });
      f.core.setNodeOccupancy("n1", [{ kind, key: "x", model: kind === "orphan" ? undefined : "m0", groups: ["heavy"], sizeBytes: 0 }]);
      expect(await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: `m2-${kind}` })).toMatchObject({ t: "waited", cause: "group", needMore: true });
      f.core.setNodeOccupancy("n1", []);
      expect((await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: `m2-${kind}` })).t).toBe("admitted");
    }
  });

  it("occupancy entries are never selectable and count toward the node only", async () => {
    const f = createFixture({ limitPerNode: 2 });
    f.core.setNodeOccupancy("n2", [{ kind: "orphan", key: "pid:7", model: undefined, groups: [], sizeBytes: 0 }]);
    expect(f.core.occupancy("n2")).toMatchObject({ orphans: 1, total: 1 });
    f.core.setNodeOccupancy("n2", [{ kind: "leftover", key: "i9", model: "m9", groups: [], sizeBytes: 500 }]);
    f.reg("b1", "m8", { nodeId: "n2", sizeBytes: 250 });
    expect(f.core.occupancy("n2")).toMatchObject({ leftovers: 1, ready: 1, total: 2, accountedBytes: 750 });
    expect((await f.svc.admit({ nodeId: "n1", model: "m", incarnation: "i1" })).t).toBe("admitted");
    expect(f.port.calls).toHaveLength(0);
  });
});

describe("admission and reservations (DESIGN §3.4 item 3)", () => {
  it("two admissions back to back on a node with one free slot: exactly one is admitted", () => {
    const f = createFixture({ limitPerNode: 2 });
    f.reg("a1", "m1");
    f.core.trackRequest("a1");
    const a = f.core.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    const b = f.core.admit({ nodeId: "n1", model: "m3", incarnation: "m3-1" });
    expect([a.t, b.t]).toEqual(["admitted", "wait"]);
    expect(b).toMatchObject({ needMore: true, stops: [] });
  });

  it("the reservation takes the address on spawn and is released when the start fails", () => {
    const f = createFixture({ limitPerNode: 1 });
    expect(f.core.admit({ nodeId: "n1", model: "m1", incarnation: "i1" }).t).toBe("admitted");
    expect(f.core.instance("i1")).toMatchObject({ state: "reserved", address: undefined });
    expect(f.core.admit({ nodeId: "n1", model: "m1", incarnation: "i1" }).t).toBe("admitted"); // idempotent
    expect(f.core.releaseReservation("i1")).toBe(true);
    expect(f.core.occupancy("n1").total).toBe(0);
    expect(f.core.admit({ nodeId: "n1", model: "m2", incarnation: "i2" }).t).toBe("admitted");
    f.core.registerLoading({ nodeId: "n1", model: "m2", incarnation: "i2", address: "a2", gpu: 1 });
    expect(f.core.instance("i2")).toMatchObject({ state: "loading", address: "a2", gpu: 1 });
    expect(f.core.occupancy("n1")).toMatchObject({ reserved: 0, loading: 1, total: 1 });
  });

  it("pending evictions count as occupied for every admission until they settle (LocalAI W9)", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.reg("a1", "m1");
    f.port.manual = true;
    const trigger = f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    expect(f.port.calls).toHaveLength(1);
    // A different load while the victim is still stopping sees no room and selects nothing new.
    const other = f.core.admit({ nodeId: "n1", model: "m3", incarnation: "m3-1" });
    expect(other).toMatchObject({ t: "wait", needMore: true, stops: [] });
    expect(f.core.loadedCount()).toBe(0);
    expect(f.core.occupancy("n1").pendingEviction).toBe(1);
    f.port.release(f.port.heldIncarnations()[0] ?? "");
    expect(await trigger).toMatchObject({ t: "waited", evicted: 1, needMore: false });
    expect(f.core.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" }).t).toBe("admitted");
  });

  it("a pins-alone shortfall admits over the limit with a policy.limit-exceeded outcome", () => {
    const f = createFixture({ limitPerNode: 1, pinnedModels: ["m1"] });
    const m1 = f.reg("a1", "m1");
    const d = f.core.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
    expect(d).toMatchObject({
      t: "admitted",
      limitExceeded: { type: "policy.limit-exceeded", nodeId: "n1", model: "m2", incarnation: "m2-1", limit: 1, occupied: 2, pinnedIncarnations: [m1] },
    });
  });

  it("a shortfall of pinned and busy instances sets need-more (not admitted)", () => {
    const f = createFixture({ limitPerNode: 2, pinnedModels: ["m1"] });
    f.reg("a1", "m1");
    f.reg("a2", "m2");
    f.core.trackRequest("a2");
    expect(f.core.admit({ nodeId: "n1", model: "m3", incarnation: "m3-1" })).toMatchObject({ t: "wait", needMore: true });
  });

  it("groups are exclusive per node after admission; other nodes are independent", async () => {
    const f = createFixture({ modelGroups: { a: ["g"], b: ["g"] } });
    f.reg("a1", "a");
    expect((await f.svc.admit({ nodeId: "n2", model: "b", incarnation: "b-2" })).t).toBe("admitted");
    expect(await f.svc.admit({ nodeId: "n1", model: "b", incarnation: "b-1" })).toMatchObject({ t: "waited", cause: "group", evicted: 1 });
    expect((await f.svc.admit({ nodeId: "n1", model: "b", incarnation: "b-1" })).t).toBe("admitted");
    const s = f.core.snapshot();
    expect(groupConflicts(s, "n1")).toEqual([]);
    expect(groupConflicts(s, "n2")).toEqual([]);
    // A conflicting reservation blocks as well.
    expect(f.core.admit({ nodeId: "n1", model: "a", incarnation: "a-9" })).toMatchObject({ t: "wait", needMore: true, stops: [] });
  });

  it("admitting an incarnation that is already live is refused", () => {
    const f = createFixture();
    const inc = f.reg("a1", "m1");
    expect(isWardenError(errorOf(() => f.core.admit({ nodeId: "n1", model: "m1", incarnation: inc })), Code.AlreadyExists)).toBe(true);
  });
});

describe("the settle table", () => {
  it("row 1: a replacement registered on the address meanwhile is left untouched", async () => {
    const f = createFixture();
    const old = f.reg("a1", "m1");
    f.port.manual = true;
    const stop = f.svc.stop(old, { reason: "admin" });
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "new", address: "a1" });
    const r = f.core.trackRequest("a1");
    f.port.release(old, { t: "stopped" });
    expect(await stop).toMatchObject({ report: { result: { row: 1, replacedBy: "new" } } });
    expect(f.core.instanceAt("a1")?.incarnation).toBe("new");
    expect(f.core.inFlight("a1")).toBe(1);
    r();
  });

  it("row 2: stopped clears the leftover request state (e.g. Free's) and later completions are no-ops", async () => {
    const f = createFixture();
    const inc = f.reg("a1", "m1");
    const late = f.core.trackRequest("a1");
    const r = await f.svc.stop(inc, { reason: "admin", force: true });
    expect(r).toMatchObject({ report: { result: { row: 2 } } });
    expect(f.core.requestState("a1")).toBeUndefined();
    late();
    expect(f.core.requestState("a1")).toBeUndefined();
    expect(f.core.instance(inc)).toBeUndefined();
  });

  it("row 3 with Free() already done registers the instance as freed: accounted, not selectable by policy, retried explicitly", async () => {
    const f = createFixture({ limitPerNode: 1 });
    const inc = f.reg("a1", "m1");
    failing(f, true);
    expect(await f.svc.stop(inc, { reason: "admin" })).toMatchObject({ report: { result: { row: 3, state: "freed" } } });
    expect(f.core.instance(inc)?.state).toBe("freed");
    expect(f.core.occupancy("n1")).toMatchObject({ freed: 1, total: 1 });
    expect(f.core.admit({ nodeId: "n1", model: "m2", incarnation: "m2" })).toMatchObject({ t: "wait", needMore: true, stops: [] });
    f.port.outcome = () => ({ t: "stopped" });
    expect(await f.svc.stop(inc, { reason: "retry" })).toMatchObject({ report: { result: { row: 2 } } });
  });

  it("row 4: the open request ids are closed with instance-dropped and their completions are no-ops", async () => {
    const f = createFixture();
    const inc = f.reg("a1", "m1");
    const r1 = f.core.trackRequest("a1");
    const r2 = f.core.trackRequest("a1");
    const open = f.core.requestState("a1")?.openRequestIds;
    failing(f);
    f.loader.dropped.add(inc);
    const res = await f.svc.stop(inc, { reason: "admin", force: true });
    expect(res).toMatchObject({ report: { result: { row: 4, terminalReason: "instance-dropped", openRequestIds: open } } });
    r1();
    r2();
    expect(f.core.requestState("a1")).toBeUndefined();
    expect(f.loader.asked).toEqual([inc]);
  });

  it("hasModelAtAddress is asked with (model, address, incarnation) inside settle, and only for failed stops", () => {
    const clock = new ManualClock();
    const asked: string[][] = [];
    const core = createWatchdogCore({
      clock,
      loader: {
        hasModelAtAddress: (m, a, i) => {
          asked.push([m, a, i]);
          // Inside settle the instance is still pending: no await between answer and table.
          expect(core.instance(i)?.pendingEviction).toBeDefined();
          return true;
        },
      },
    });
    core.registerReady({ nodeId: "n", model: "m", incarnation: "i", address: "a" });
    const sel = core.selectExplicit("i", { reason: "admin" });
    expect(sel.t).toBe("stop");
    expect(core.settle("i", { t: "failed", message: "x", freed: false })).toMatchObject({ row: 3, state: "ready" });
    core.selectExplicit("i", { reason: "admin" });
    core.settle("i", { t: "alreadyGone" });
    expect(asked).toEqual([["m", "a", "i"]]);
    expect(core.settle("i", { t: "stopped" })).toMatchObject({ row: 0, t: "not-pending" });
  });

  it("a process exit while its stop is in flight settles as gone even if the stop reports failure", async () => {
    const f = createFixture();
    const inc = f.reg("a1", "m1");
    f.port.manual = true;
    const stop = f.svc.stop(inc, { reason: "admin" });
    expect(f.core.remove(inc).t).toBe("pending");
    f.port.release(inc, { t: "failed", message: "rpc cancelled", freed: false });
    expect(await stop).toMatchObject({ report: { result: { row: 2 } } });
    expect(f.core.instance(inc)).toBeUndefined();
  });
});

describe("pending evictions", () => {
  it("are invisible to selectors, idle/busy checks and the loaded count, while request state stays live", () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 1, busyCheck: true, busyTimeoutMs: 1, limitPerNode: 1, forceEvictionWhenBusy: true });
    const inc = f.reg("a1", "m1");
    f.core.trackRequest("a1");
    const sel = f.core.selectExplicit(inc, { reason: "admin" });
    expect(sel).toMatchObject({ t: "stop", command: { wasBusy: true, force: false } });
    f.clock.advance(100);
    expect(f.core.tick().stops).toHaveLength(0);
    expect(f.core.enforceLimit("n1").stops).toHaveLength(0);
    expect(f.core.loadedCount()).toBe(0);
    expect(f.core.instanceAt("a1")).toBeUndefined();
    const done = f.core.trackRequest("a1");
    expect(f.core.inFlight("a1")).toBe(2);
    done();
    expect(f.core.inFlight("a1")).toBe(1);
    // Joining: a second explicit stop gets the same command, no new selection.
    expect(f.core.selectExplicit(inc, { reason: "drain", force: true })).toMatchObject({ t: "joined", command: { reason: "admin" } });
  });

  it("explicit paths take pinned and busy instances; force only when asked", () => {
    const f = createFixture({ pinnedModels: ["m1"] });
    const inc = f.reg("a1", "m1");
    f.core.trackRequest("a1");
    expect(f.core.selectExplicit(inc, { reason: "drain" })).toMatchObject({ t: "stop", command: { force: false, wasBusy: true, reason: "drain" } });
    expect(f.core.selectExplicit("nope", { reason: "admin" })).toEqual({ t: "unknown" });
    f.core.admit({ nodeId: "n1", model: "m2", incarnation: "r" });
    expect(f.core.selectExplicit("r", { reason: "admin" })).toEqual({ t: "reserved" });
  });

  it("drain selects every instance on a node, config removal every instance of a model", async () => {
    const f = createFixture();
    f.reg("a1", "m1");
    f.reg("a2", "m2");
    f.reg("b1", "m1", { nodeId: "n2" });
    const drained = await f.svc.drainNode("n1");
    expect(drained.map((d) => d.t)).toEqual(["settled", "settled"]);
    expect(f.core.selectModel("m1", { reason: "config" }).map((s) => s.selection.t)).toEqual(["stop"]);
  });
});

describe("tick paths", () => {
  it("the busy-killer ignores pins (DESIGN §3.4 item 8) while idle eviction respects them", () => {
    const f = createFixture({ busyCheck: true, busyTimeoutMs: 10, idleCheck: true, idleTimeoutMs: 10, pinnedModels: ["stuck", "idle"] });
    f.reg("a1", "stuck");
    f.core.trackRequest("a1");
    f.reg("a2", "idle");
    f.clock.advance(50);
    expect(f.core.tick().stops.map((s) => [s.model, s.reason, s.force])).toEqual([["stuck", "busy", true]]);
  });

  it("nothing is reclaimed while the reclaimer is off, whatever the pressure", () => {
    const f = createFixture();
    f.reg("a1", "m1", { gpu: 0 });
    f.core.reportMemory("n1", { gpus: [{ index: 0, totalBytes: 10, usedBytes: 10 }] });
    expect(f.core.tick().stops).toEqual([]);
  });

  it("a loader query that throws registers the instance again rather than forgetting it", () => {
    const clock = new ManualClock();
    const core = createWatchdogCore({
      clock,
      loader: {
        hasModelAtAddress: () => {
          throw new Error("bug");
        },
      },
    });
    core.registerReady({ nodeId: "n", model: "m", incarnation: "i", address: "a" });
    core.selectExplicit("i", { reason: "admin" });
    expect(core.settle("i", { t: "failed", message: "x", freed: false })).toMatchObject({ row: 3 });
    expect(core.instanceAt("a")?.incarnation).toBe("i");
  });
});

describe("memory reclaimer per node and per GPU", () => {
  function setup(): Fixture {
    const f = createFixture({ memoryReclaimer: true, memoryReleaseWaitMs: 10_000, memoryReleaseHoldMs: 30_000 });
    f.reg("g0", "m-gpu0", { gpu: 0 });
    f.reg("g1", "m-gpu1", { gpu: 1 });
    f.reg("g1b", "m-gpu1-b", { gpu: 1 });
    return f;
  }
  const reading = (gpu0: number, gpu1: number) => ({
    gpus: [
      { index: 0, totalBytes: 100, usedBytes: gpu0 },
      { index: 1, totalBytes: 100, usedBytes: gpu1 },
    ],
  });

  it("pressure on one GPU evicts from that GPU only, even when the node average is low", async () => {
    const f = setup();
    const changes = f.core.reportMemory("n1", reading(10, 97));
    expect(changes).toMatchObject([{ device: 1, on: true }]);
    const { decision } = f.svc.tick();
    expect(decision.stops.map((s) => s.model)).toEqual(["m-gpu1"]);
    await flush();
  });

  it("waits for a newer reading or the release wait after a settle; one eviction at a time", async () => {
    const f = setup();
    f.port.manual = true;
    f.core.reportMemory("n1", reading(10, 99));
    expect(f.svc.tick().decision.stops).toHaveLength(1);
    f.clock.advance(500);
    expect(f.svc.tick().decision.stops).toHaveLength(0); // still in flight
    f.port.release(f.port.heldIncarnations()[0] ?? "");
    await flush();
    f.clock.advance(500);
    expect(f.svc.tick().decision.stops).toHaveLength(0); // release wait: no newer reading yet
    f.clock.advance(100);
    f.core.reportMemory("n1", reading(10, 98)); // newer reading still shows pressure
    expect(f.svc.tick().decision.stops.map((s) => s.model)).toEqual(["m-gpu1-b"]);
    f.port.release(f.port.heldIncarnations()[0] ?? "");
    await flush();
  });

  it("the release wait also ends after 10 s without a reading", async () => {
    const f = setup();
    f.core.reportMemory("n1", reading(10, 99));
    f.svc.tick();
    await flush();
    f.clock.advance(9_000);
    expect(f.svc.tick().decision.stops).toHaveLength(0);
    f.clock.advance(1_000);
    expect(f.svc.tick().decision.stops).toHaveLength(1);
    await flush();
  });

  it("hysteresis: below the release threshold nothing more is evicted; pressure turns off only after 30 s below", () => {
    const f = setup();
    f.core.reportMemory("n1", reading(10, 96));
    f.core.reportMemory("n1", reading(10, 92)); // between off and on: still on, still relieving
    expect(f.core.snapshot().nodes[0]?.memory.find((d) => d.device === 1)?.pressure).toBe(true);
    f.core.reportMemory("n1", reading(10, 85));
    f.clock.advance(20_000);
    expect(f.core.tick()).toMatchObject({ stops: [], pressureChanges: [] });
    f.clock.advance(10_000);
    expect(f.core.tick().pressureChanges).toMatchObject([{ device: 1, on: false }]);
  });

  it("flapping around the threshold does not cause an eviction storm", async () => {
    const f = setup();
    for (let i = 0; i < 20; i++) {
      f.core.reportMemory("n1", reading(10, i % 2 === 0 ? 96 : 94));
      f.svc.tick();
      await flush();
      f.clock.advance(500);
    }
    // 10 s of flapping: the first eviction, then the release waits spaced by newer readings that still show pressure.
    expect(f.port.calls.length).toBeLessThanOrEqual(3);
  });

  it("a node without GPUs uses system memory; pinned instances are never reclaimed", async () => {
    const f = createFixture({ memoryReclaimer: true, pinnedModels: ["p"] });
    f.reg("a1", "p");
    f.reg("a2", "q");
    f.core.reportMemory("n1", { gpus: [], ram: { totalBytes: 100, usedBytes: 99 } });
    expect(f.svc.tick().decision.stops.map((s) => s.model)).toEqual(["q"]);
    await flush();
  });

  it("rejects bad readings naming the field", () => {
    const f = setup();
    expectInvalid(() => f.core.reportMemory("n1", { gpus: [{ index: 0, totalBytes: Number.NaN, usedBytes: 1 }] }), "gpus[0].totalBytes");
    expectInvalid(() => f.core.reportMemory("n1", { gpus: [{ index: -1, totalBytes: 1, usedBytes: 1 }] }), "gpus[0].index");
  });
});

describe("policy changes apply live and are validated", () => {
  it("rejects invalid values with INVALID_ARGUMENT naming the field, and applies nothing", () => {
    const f = createFixture();
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: -1 }), "limitPerNode");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: Number.NaN }), "limitPerNode");
    expectInvalid(() => f.core.updatePolicy({ idleTimeoutMs: -5 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ busyTimeoutMs: Number.NaN }), "busyTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ memoryThreshold: 0 }), "memoryThreshold");
    expectInvalid(() => f.core.updatePolicy({ memoryThreshold: 1.01 }), "memoryThreshold");
    expectInvalid(() => f.core.updatePolicy({ memoryReleaseThreshold: 0.99 }), "memoryReleaseThreshold");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: 3, idleTimeoutMs: -1 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ bogus: 1 } as never), "bogus");
    expectInvalid(() => f.core.updatePolicy({ modelGroups: { m: "g" } } as never), "modelGroups.m");
    expect(f.core.getPolicy().limitPerNode).toBe(0);
  });

  it("pins, groups and limits change without losing accounting", async () => {
    const f = createFixture();
    f.reg("a1", "m1");
    f.core.trackRequest("a1");
    f.reg("a2", "m2");
    f.core.updatePolicy({ limitPerNode: 2, pinnedModels: ["m2"], modelGroups: { m1: ["g"] } });
    expect(f.core.inFlight("a1")).toBe(1);
    expect(f.core.loadedCount()).toBe(2);
    // m1 busy, m2 pinned: the shortfall is not pins alone.
    expect(await f.svc.admit({ nodeId: "n1", model: "m3", incarnation: "m3" })).toMatchObject({ t: "waited", needMore: true });
    f.core.updatePolicy({ pinnedModels: [] });
    expect(await f.svc.admit({ nodeId: "n1", model: "m3", incarnation: "m3" })).toMatchObject({ evicted: 1 });
    expect(f.port.models()).toEqual(["m2"]);
  });

  it("registration writes the model's groups and pin into the policy tables", () => {
    const f = createFixture();
    f.core.registerLoading({ nodeId: "n1", model: "m", incarnation: "i", address: "a", groups: ["g"], pinned: true });
    expect(f.core.getPolicy()).toMatchObject({ pinnedModels: ["m"], modelGroups: { m: ["g"] } });
    expect(f.core.instance("i")).toMatchObject({ pinned: true, groups: ["g"] });
  });
});

describe("bad input and caps", () => {
  it("completions for unknown or cleared requests are no-ops; unmark on unknown addresses creates nothing", () => {
    const f = createFixture();
    f.core.unmark("nowhere");
    expect(f.core.snapshot().addresses).toEqual([]);
  });

  it("caller-keyed maps are capped", () => {
    const clock = new ManualClock();
    const core = createWatchdogCore({
      clock,
      loader: { hasModelAtAddress: () => true },
      caps: { maxAddresses: 2, maxOpenRequestsPerAddress: 2, maxInstances: 1, maxNodes: 1 },
    });
    core.trackRequest("a");
    core.trackRequest("a");
    expect(isWardenError(errorOf(() => core.trackRequest("a")), Code.ResourceExhausted)).toBe(true);
    core.trackRequest("b");
    expect(isWardenError(errorOf(() => core.trackRequest("c")), Code.ResourceExhausted)).toBe(true);
    core.registerLoading({ nodeId: "n", model: "m", incarnation: "i", address: "x" });
    expect(isWardenError(errorOf(() => core.admit({ nodeId: "n", model: "m2", incarnation: "j" })), Code.ResourceExhausted)).toBe(true);
    expect(isWardenError(errorOf(() => core.reportMemory("other", { gpus: [] })), Code.ResourceExhausted)).toBe(true);
  });

  it("unowned request state is garbage-collected by the tick after the idle timeout", () => {
    const f = createFixture({ idleTimeoutMs: 100 });
    const done = f.core.trackRequest("stray");
    done();
    f.clock.advance(101);
    expect(f.core.tick().untrackedAddresses).toEqual(["stray"]);
    expect(f.core.requestState("stray")).toBeUndefined();
  });

  it("names are validated", () => {
    const f = createFixture();
    expectInvalid(() => f.core.registerLoading({ nodeId: "", model: "m", incarnation: "i", address: "a" }), "nodeId");
    expectInvalid(() => f.core.registerLoading({ nodeId: "n", model: "m\u0000", incarnation: "i", address: "a" }), "model");
    expectInvalid(() => f.core.registerLoading({ nodeId: "n", model: "m", incarnation: "i", address: "a", sizeBytes: -1 }), "sizeBytes");
  });

  it("registering on an address held by another live incarnation is refused", () => {
    const f = createFixture();
    f.reg("a1", "m1");
    expect(isWardenError(errorOf(() => f.core.registerLoading({ nodeId: "n1", model: "m2", incarnation: "x", address: "a1" })), Code.FailedPrecondition)).toBe(
      true,
    );
  });
});

describe("snapshot", () => {
  it("lists every instance with node, address, incarnation, state, in-flight, busy/idle since, last used and pending eviction", () => {
    const f = createFixture();
    const a = f.reg("a1", "m1");
    f.core.trackRequest("a1");
    const b = f.reg("a2", "m2");
    f.core.selectExplicit(b, { reason: "admin" });
    f.core.admit({ nodeId: "n2", model: "m3", incarnation: "r" });
    const s = f.core.snapshot();
    expect(checkSnapshotInvariants(s)).toEqual([]);
    const byInc = new Map(s.instances.map((i) => [i.incarnation, i]));
    expect(byInc.get(a)).toMatchObject({ nodeId: "n1", address: "a1", state: "ready", inFlight: 1, pendingEviction: undefined });
    expect(byInc.get(a)?.busySinceMs).toBeDefined();
    expect(byInc.get(b)).toMatchObject({ state: "ready", pendingEviction: { reason: "admin" } });
    expect(byInc.get(b)?.idleSinceMs).toBeDefined();
    expect(byInc.get("r")).toMatchObject({ nodeId: "n2", state: "reserved", address: undefined });
    expect(s.loadedCount).toBe(1);
  });

  it("the invariant checker catches an inconsistent snapshot", () => {
    const f = createFixture();
    f.reg("a1", "m1");
    const s = f.core.snapshot();
    expect(checkSnapshotInvariants({ ...s, loadedCount: 5 })).not.toEqual([]);
  });
});

describe("stop outcome mapping", () => {
  it("NOT_FOUND is already gone; deadline and unavailable are failures; invalid argument is a bug", async () => {
    const { stopOutcomeFromError } = await import("./stop-command.js");
    expect(stopOutcomeFromError(new WardenError(Code.NotFound, "x"))).toEqual({ t: "alreadyGone" });
    expect(stopOutcomeFromError(new WardenError(Code.DeadlineExceeded, "x"), true)).toMatchObject({ t: "failed", freed: true, bug: false });
    expect(stopOutcomeFromError(new WardenError(Code.Unavailable, "x"))).toMatchObject({ t: "failed", code: Code.Unavailable });
    expect(stopOutcomeFromError(new WardenError(Code.InvalidArgument, "x"))).toMatchObject({ t: "failed", bug: true });
    expect(stopOutcomeFromError(new Error("boom"))).toMatchObject({ t: "failed", code: Code.Unknown, message: "boom" });
  });
});

describe("policy maxima (documented in @warden/common limits.ts)", () => {
  it("refuses durations and counts above their maxima, naming the field and applying nothing", () => {
    const f = createFixture();
    const before = f.core.getPolicy();
    expectInvalid(() => f.core.updatePolicy({ idleTimeoutMs: 2 ** 64 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: 2, idleTimeoutMs: 30 * 86_400_000 + 1 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ busyTimeoutMs: 31 * 86_400_000 }), "busyTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ tickIntervalMs: 3_600_001 }), "tickIntervalMs");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: 1025 }), "limitPerNode");
    expectInvalid(() => f.core.updatePolicy({ memoryReleaseHoldMs: 2 ** 53 }), "memoryReleaseHoldMs");
    expect(f.core.getPolicy()).toEqual(before);
    f.core.updatePolicy({ idleTimeoutMs: 30 * 86_400_000, limitPerNode: 1024, tickIntervalMs: 3_600_000 });
    expect(f.core.getPolicy()).toMatchObject({ idleTimeoutMs: 30 * 86_400_000, limitPerNode: 1024, tickIntervalMs: 3_600_000 });
  });
});
