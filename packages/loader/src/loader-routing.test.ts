import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import type { StopAnswer } from "./ports.js";
import { createHarness, defaultModels, deferred, rejection } from "./test-fakes.js";

describe("routing", () => {
  it("acquire tracks the call in the watchdog: inFlight 1 → 0 after complete(), and complete() is idempotent", async () => {
    const h = createHarness();
    const a = await h.loader.acquire("m1", h.never);
    expect(h.loader.core.inFlight(a.address)).toBe(1);
    const b = await h.loader.acquire("m1", h.never);
    expect(b.incarnation).toBe(a.incarnation);
    expect(b.backend).toBe(a.backend);
    expect(h.loader.core.inFlight(a.address)).toBe(2);
    a.complete();
    a.complete();
    expect(h.loader.core.inFlight(a.address)).toBe(1);
    b.complete();
    expect(h.loader.core.inFlight(a.address)).toBe(0);
    expect(h.loader.core.instance(a.incarnation)?.lastUsedMs).toBeDefined();
    expect(h.n1.starts).toHaveLength(1);
  });

  it("the routing lookup does not keep the lifecycle lock: a force stop proceeds while a call is open", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const stop = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    expect(stop.value().t).toBe("stopped");
    lease.complete();
  });

  it("a call for a local model pending eviction waits for the settle, then gets a fresh instance; no second copy meanwhile", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<StopAnswer>();
    h.n1.stopScript = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    expect(h.loader.core.instance(m1.incarnation)?.pendingEviction).toBeDefined();
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.run(5_000);
    expect(call.done()).toBe(false);
    expect(h.n1.starts).toHaveLength(1);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(unload.value().t).toBe("stopped");
    const lease = call.value();
    expect(lease.incarnation).not.toBe(m1.incarnation);
    expect(h.n1.starts).toHaveLength(2);
    expect(h.log.indexOf(`event eviction.stopped ${m1.incarnation}`)).toBeLessThan(h.log.indexOf(`start m1 ${lease.incarnation}`));
    lease.complete();
  });

  it("a call for a local+remote model whose StopBackend is in flight starts no second copy before the stop is answered", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<StopAnswer>();
    h.n2.stopScript = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    expect(h.n2.stopsOf(m1.incarnation)).toHaveLength(1);
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.run(5_000);
    expect(call.done()).toBe(false);
    expect(h.n2.starts).toHaveLength(1);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(unload.value().t).toBe("stopped");
    expect(call.value().incarnation).not.toBe(m1.incarnation);
    expect(h.n2.starts).toHaveLength(2);
    call.value().complete();
  });

  it("a call waiting on a pending eviction that is registered again (row 3) is routed to that same instance", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<StopAnswer>();
    h.n1.stopScript = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.flush();
    expect(call.done()).toBe(false);
    gate.reject(new WardenError(Code.DeadlineExceeded, "StopBackend deadline"));
    await h.flush();
    expect(unload.value().t).toBe("registered-again");
    expect(call.value().incarnation).toBe(m1.incarnation);
    expect(h.n1.starts).toHaveLength(1);
    call.value().complete();
  });

  it("a waiting call gives up with its own deadline and leaves no count behind", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<StopAnswer>();
    h.n1.stopScript = () => gate.promise;
    h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    const ctl = new AbortController();
    const call = h.track(h.loader.acquire("m1", ctl.signal));
    await h.flush();
    ctl.abort(new WardenError(Code.DeadlineExceeded, "call deadline"));
    await h.flush();
    expect(call.error().code).toBe(Code.DeadlineExceeded);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(h.loader.core.inFlight(m1.address!)).toBe(0);
    expect(h.n1.starts).toHaveLength(1);
  });

  it("reportUnavailable removes the instance through the watchdog (health, force) and the next call loads afresh", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    h.n1.stopScript = () => new WardenError(Code.NotFound, "process gone");
    await h.loader.reportUnavailable(lease.incarnation);
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: lease.incarnation, reason: "health", force: true, wasBusy: true }]);
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: lease.incarnation, alreadyGone: true }]);
    expect(h.loader.core.instance(lease.incarnation)).toBeUndefined();
    expect(h.loader.heldInstance(lease.incarnation)).toBeUndefined();
    expect(h.loader.core.inFlight(lease.address)).toBe(0);
    lease.complete();
    const next = await h.loader.acquire("m1", h.never);
    expect(next.incarnation).not.toBe(lease.incarnation);
    next.complete();
    // an unknown incarnation is ignored
    await h.loader.reportUnavailable("nope");
  });

  it("a backend exit reported by the agent removes the ready instance (no phantom) and emits backend.exited", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.loader.onBackendGone(m1.incarnation, { exitCode: 137, signal: "SIGKILL", intentional: false, lastStderrLine: "oom" });
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.events.ofType("backend.exited")).toMatchObject([{ incarnation: m1.incarnation, exitCode: 137, intentional: false }]);
    expect(h.n1.stops).toHaveLength(0);
  });

  it("a remote-only instance found in an inventory becomes local+remote when first routed", async () => {
    const h = createHarness();
    const spec = h.loader.modelSpec("m1")!;
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(true);
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(false);
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.incarnation).toBe("old-1");
    expect(h.loader.heldInstance("old-1")?.placement).toBe("local-remote");
    expect(h.connector.connected.map((b) => b.address)).toEqual(["n2:7000"]);
    expect(h.n2.starts).toHaveLength(0);
    lease.complete();
  });

  it("the per-model waiting cap refuses further calls with RESOURCE_EXHAUSTED, and frees a slot when a call leaves", async () => {
    const h = createHarness({ maxWaitingPerModel: 3 });
    h.n1.startScript = () => {};
    const waiting = Array.from({ length: 3 }, () => h.track(h.loader.ensureLoaded("m1", h.never)));
    await h.flush();
    const err = await rejection(h.loader.ensureLoaded("m1", h.never));
    expect(err.code).toBe(Code.ResourceExhausted);
    // other models have their own queue
    h.track(h.loader.ensureLoaded("m2", h.never));
    h.n1.startOf("m1").spawned().ready();
    await h.flush();
    expect(waiting.every((w) => w.value().phase === "ready")).toBe(true);
    expect((await h.loader.ensureLoaded("m1", h.never)).incarnation).toBe(waiting[0]!.value().incarnation);
    expect(h.n1.starts.filter((s) => s.request.model === "m1")).toHaveLength(1);
  });
});

describe("other removal paths and events", () => {
  it("the idle check on the tick evicts an idle instance (reason idle) through the stop sequence", async () => {
    const h = createHarness({ policy: { idleCheck: true, idleTimeoutMs: 1_000 } });
    h.loader.startTicking();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    await h.run(1_000);
    expect(h.events.ofType("eviction.started")).toHaveLength(0);
    await h.run(1_000);
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: m1.incarnation, reason: "idle", force: false }]);
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: m1.incarnation, reason: "idle" }]);
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    h.loader.close();
  });

  it("a model removed from the config is unloaded gracefully with reason config", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    await Promise.all(h.loader.setModels(defaultModels().filter((m) => m.id !== "m1")));
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: m1.incarnation, reason: "config", force: false }]);
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    await expect(h.loader.ensureLoaded("m1", h.never)).rejects.toMatchObject({ code: Code.NotFound });
  });

  it("a journal that cannot record the stop intent stops nothing and drops nothing (row 3, local half kept)", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.journal.failRecord = new WardenError(Code.Unavailable, "journal fsync failed");
    const out = await h.loader.unload("m1", { force: true });
    expect(out).toMatchObject({ t: "registered-again", incarnation: m1.incarnation });
    expect(h.n2.stops).toHaveLength(0);
    expect(h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation)).toBe(true);
    expect(h.loader.core.instance(m1.incarnation)?.state).toBe("ready");
    expect(h.loader.leftoverList()).toHaveLength(0);
  });

  it("a leftover reported gone by the agent is reaped at once and its intent cleared", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = () => new WardenError(Code.Unavailable, "down");
    expect((await h.loader.unload("m1", { force: true })).t).toBe("leftover");
    h.loader.onBackendGone(m1.incarnation, { exitCode: 0, signal: "", intentional: true, lastStderrLine: "" });
    await h.flush();
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.journal.open.has(m1.incarnation)).toBe(false);
    expect(h.events.ofType("leftover.reaped")).toMatchObject([{ incarnation: m1.incarnation, attempts: 0 }]);
    expect(h.loader.core.occupancy("n2").total).toBe(0);
  });

  it("a leftover still not stopped after stuckAfterMs is flagged stuck (leftover.stuck) and still retried", async () => {
    const h = createHarness({ stuckAfterMs: 10_000 });
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = () => new WardenError(Code.Unavailable, "down");
    expect((await h.loader.unload("m1", { force: true })).t).toBe("leftover");
    await h.run(16_000);
    expect(h.events.ofType("leftover.stuck")).toMatchObject([{ incarnation: m1.incarnation, lastError: "down" }]);
    expect(h.loader.leftoverList()[0]?.stuck).toBe(true);
    const tries = h.n2.stopsOf(m1.incarnation).length;
    await h.run(16_000);
    expect(h.n2.stopsOf(m1.incarnation).length).toBeGreaterThan(tries);
    expect(h.n2.stopsOf(m1.incarnation).slice(1).every((s) => s.force && s.reason === "leftover")).toBe(true);
  });

  it("forget removes a leftover by an operator's word without stopping anything", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = () => new WardenError(Code.Unavailable, "down");
    await h.loader.unload("m1", { force: true });
    const stops = h.n2.stops.length;
    expect(h.loader.forget(m1.incarnation, "alice", "node gone for good")).toBe(true);
    await h.run(60_000);
    expect(h.n2.stops).toHaveLength(stops);
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.events.ofType("instance.forgotten")).toMatchObject([{ incarnation: m1.incarnation, operator: "alice" }]);
    expect(h.loader.forget(m1.incarnation, "alice", "again")).toBe(false);
  });

  it("pins keep an instance from LRU eviction; the load goes over the limit with policy.limit-exceeded", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" ? modelSpec({ ...m, pinned: true }) : m));
    const h = createHarness({ models, policy: { limitPerNode: 1 } });
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    await h.loader.ensureLoaded("m2", h.never);
    expect(h.loader.core.instance(m1.incarnation)?.state).toBe("ready");
    expect(h.events.ofType("policy.limit-exceeded")).toMatchObject([{ model: "m2", limit: 1, occupied: 2, pinned: 1 }]);
    expect(h.events.ofType("eviction.started")).toHaveLength(0);
  });
});

describe("accounting inputs and live policy", () => {
  it("orphans on a node count toward its limit and block a load there (UNAVAILABLE naming orphan after loadWait) until cleared", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 }, enforcement: { maxAttempts: 3, intervalMs: 1_000 }, loadWaitMs: 3_000 });
    h.loader.setOrphans("n1", [{ kind: "orphan", key: "pid-77", model: undefined, groups: [], sizeBytes: 0 }]);
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(5_000);
    expect(p.error().code).toBe(Code.Unavailable);
    expect(p.error().rawMessage).toContain("orphan");
    expect(h.n1.starts).toHaveLength(0);
    h.loader.setOrphans("n1", []);
    expect((await h.loader.ensureLoaded("m1", h.never)).phase).toBe("ready");
  });

  it("a limit raised live lets the next load in without evicting", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.loader.updatePolicy({ limitPerNode: 2 });
    await h.loader.ensureLoaded("m2", h.never);
    expect(h.loader.core.instance(m1.incarnation)?.state).toBe("ready");
    expect(h.events.ofType("eviction.started")).toHaveLength(0);
  });

  it("isBeingStopped is false for a routable instance, true while its stop is pending and once it is dropped", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const lease = await h.loader.acquire("m1", h.never);
    expect(h.loader.isBeingStopped(lease.incarnation)).toBe(false);
    const gate = deferred<StopAnswer>();
    h.n2.stopScript = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    expect(h.loader.isBeingStopped(lease.incarnation)).toBe(true);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(unload.value().t).toBe("stopped");
    expect(h.loader.isBeingStopped(lease.incarnation)).toBe(true);
    lease.complete();
  });

  it("the snapshot lists each instance with its placement and backend", async () => {
    const h = createHarness();
    h.placement.route.set("m2", "n2");
    await h.loader.ensureLoaded("m1", h.never);
    await h.loader.ensureLoaded("m2", h.never);
    const rows = h.loader.snapshot().instances.map((i) => [i.model, i.nodeId, i.placement, i.backend, i.state]);
    expect(rows).toEqual([
      ["m1", "n1", "local", "sim", "ready"],
      ["m2", "n2", "local-remote", "sim", "ready"],
    ]);
  });
});
