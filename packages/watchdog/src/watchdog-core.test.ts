import { Code, ManualClock, isWardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createWatchdogCore } from "./watchdog-core.js";
import { createFixture, type Fixture } from "./watchdog-fixture.js";
import { groupConflicts } from "./watchdog-snapshot.js";
import { errorOf } from "./expect-invalid.js";

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

  it("row 1 needs a later incarnation: an earlier one still pending on the recycled address is no replacement (seed 14857)", async () => {
    const f = createFixture();
    // Its process is gone and the agent gave a1 to the next process; its stop is still out.
    const stale = f.reg("a1", "m1");
    f.port.manual = true;
    const staleStop = f.svc.stop(stale, { reason: "admin" });
    const live = f.reg("a1", "m2");
    const stop = f.svc.stop(live, { reason: "admin" });
    f.port.release(live, { t: "failed", message: "waiting to shut down model: context deadline exceeded", freed: false });
    // The loader still holds it: registered again and counted, never dropped as "replaced".
    expect(await stop).toMatchObject({ report: { result: { row: 3, state: "ready" } } });
    expect(f.core.instanceAt("a1")?.incarnation).toBe(live);
    expect(f.core.occupancy("n1")).toMatchObject({ ready: 1, pendingEviction: 1, total: 2 });
    f.port.release(stale, { t: "alreadyGone" });
    expect(await staleStop).toMatchObject({ report: { result: { row: 1, replacedBy: live } } });
    expect(f.core.occupancy("n1")).toMatchObject({ ready: 1, total: 1 });
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
