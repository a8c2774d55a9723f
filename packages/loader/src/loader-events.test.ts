import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import type { StopAnswer } from "./ports.js";
import { createHarness, deferred } from "./test-fakes.js";

const unavailable = () => new WardenError(Code.Unavailable, "connection refused");

describe("events", () => {
  it("a local unload emits backend.loaded, eviction.started, eviction.stopped — started before the stop intent and StopBackend", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    await h.loader.unload("m1", { force: false });
    expect(h.events.types()).toEqual(["backend.loaded", "eviction.started", "eviction.stopped"]);
    const inc = m1.incarnation;
    const order = [`event eviction.started ${inc}`, `free ${m1.address!}`, `intent.record ${inc}`, `stop ${inc}`, `intent.clear ${inc}`, `event eviction.stopped ${inc}`];
    expect(h.log.filter((l) => order.includes(l))).toEqual(order);
    expect(h.events.ofType("eviction.started")[0]).toMatchObject({ nodeId: "n1", model: "m1", address: m1.address, incarnation: inc, reason: "admin", trigger: "", wasBusy: false, force: false, openRequestIds: [] });
  });

  it("a remote stop that fails and is later reaped emits eviction.failed(leftover), eviction.retried per failed retry, then leftover.reaped", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    await h.loader.unload("m1", { force: true });
    await h.run(3_000); // retries at 1 s and 3 s fail
    h.n2.stopScript = () => ({ t: "stopped" });
    await h.run(4_000); // retry at 7 s succeeds
    expect(h.events.types()).toEqual(["backend.loaded", "eviction.started", "eviction.failed", "eviction.retried", "eviction.retried", "leftover.reaped"]);
    expect(h.events.ofType("eviction.failed")[0]).toMatchObject({ incarnation: m1.incarnation, outcome: "leftover", error: "connection refused", reason: "admin" });
    expect(h.events.ofType("eviction.retried").map((e) => e.attempt)).toEqual([1, 2]);
    expect(h.events.ofType("leftover.reaped")[0]).toMatchObject({ incarnation: m1.incarnation, attempts: 3 });
  });

  it("row 4 with a call open: eviction.failed carries the open request ids with terminal reason instance-dropped; the late completion is a no-op", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const lease = await h.loader.acquire("m1", h.never);
    h.n2.stopScript = unavailable;
    expect((await h.loader.unload("m1", { force: true })).t).toBe("leftover");
    const failed = h.events.ofType("eviction.failed")[0]!;
    expect(failed.openRequestIds).toHaveLength(1);
    expect(failed.terminalReason).toBe("instance-dropped");
    expect(h.events.ofType("eviction.started")[0]?.openRequestIds).toEqual(failed.openRequestIds);
    expect(h.loader.core.inFlight(lease.address)).toBe(0);
    lease.complete();
    expect(h.loader.core.inFlight(lease.address)).toBe(0);
  });

  it("a failed load emits backend.load-failed and never backend.loaded", async () => {
    const h = createHarness();
    h.n1.startScript = (s) => {
      s.spawned().failed("could not load model: bad file", { code: "LOAD_FAILED", exitCode: 1, lastStderrLine: "bad magic" });
    };
    await expect(h.loader.ensureLoaded("m1", h.never)).rejects.toBeInstanceOf(WardenError);
    expect(h.events.types()).toEqual(["backend.load-failed", "load.failed"]);
    const s = h.n1.starts[0]!;
    expect(h.events.ofType("load.failed")[0]).toMatchObject({ nodeId: "n1", model: "m1", incarnation: "", loadIncarnation: s.incarnation, code: "FAILED_PRECONDITION", phase: "loading" });
    expect(h.events.ofType("backend.load-failed")[0]).toMatchObject({ nodeId: "n1", model: "m1", address: s.address, incarnation: s.incarnation, code: "LOAD_FAILED", exitCode: 1, lastStderrLine: "bad magic", outcomeUnknown: false });
  });

  it("the busy-killer force-stops a call stuck past busyTimeoutMs (reason busy, wasBusy) even though the model is pinned", async () => {
    const h = createHarness({ policy: { busyCheck: true, busyTimeoutMs: 1_000, pinnedModels: ["m1"] } });
    h.loader.startTicking();
    const lease = await h.loader.acquire("m1", h.never);
    await h.run(2_000);
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: lease.incarnation, reason: "busy", force: true, wasBusy: true }]);
    expect(h.frees.callsAt(lease.address)).toBe(0);
    expect(h.loader.core.instance(lease.incarnation)).toBeUndefined();
    lease.complete();
    h.loader.close();
  });
});

describe("more stop-sequence invariants", () => {
  it("eviction.started is durable before anything is sent: no stop intent and no StopBackend until the outbox has it", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<undefined>();
    h.events.durableGate = gate.promise.then(() => undefined);
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.run(1_000);
    expect(h.events.ofType("eviction.started")).toHaveLength(1);
    expect(h.journal.records).toHaveLength(0);
    expect(h.n2.stops).toHaveLength(0);
    expect(h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation)).toBe(true);
    gate.resolve(undefined);
    await h.flush();
    expect(unload.value().t).toBe("stopped");
    expect(h.log.indexOf(`durable eviction.started ${m1.incarnation}`)).toBeLessThan(h.log.indexOf(`stop ${m1.incarnation} force`));
  });

  it("scenario 53: a graceful stop blocked in Free does not block a load of another model", async () => {
    const h = createHarness();
    await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<undefined>();
    h.frees.script = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: false }));
    await h.flush();
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(m2.phase).toBe("ready");
    expect(unload.done()).toBe(false);
    gate.resolve(undefined);
    await h.flush();
    expect(unload.value().t).toBe("stopped");
  });

  it("local+remote still loading: a lock timeout is row 3 with the local half still there", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    h.n2.startScript = (s) => {
      s.spawned();
    };
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const s = h.n2.startOf("m1");
    const unload = h.track(h.loader.unload("m1", { force: true, stopTimeoutMs: 200 }));
    await h.run(200);
    expect(unload.error().rawMessage).toBe('waiting to shut down model "m1": context deadline exceeded');
    expect(h.loader.hasModelAtAddress("m1", s.address, s.incarnation)).toBe(true);
    expect(h.n2.stops).toHaveLength(0);
    expect(h.loader.leftoverList()).toHaveLength(0);
    s.ready();
    await h.flush();
    expect(load.value().placement).toBe("local-remote");
    expect(h.loader.core.instance(s.incarnation)?.state).toBe("ready");
  });

  it("two unloads of one model share one stop (single flight): one StopBackend, both see stopped", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<StopAnswer>();
    h.n1.stopScript = () => gate.promise;
    const a = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    const b = h.track(h.loader.stopInstance(m1.incarnation, { force: true }));
    await h.flush();
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(a.value()).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(b.value()).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(h.n1.stopsOf(m1.incarnation)).toHaveLength(1);
    expect(h.events.ofType("eviction.started")).toHaveLength(1);
  });

  it("an LRU victim on a remote node whose stop fails keeps the triggering load waiting until the leftover is reaped", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    h.placement.route.set("m1", "n2");
    h.placement.route.set("m2", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(5_000);
    expect(h.events.ofType("eviction.failed")).toMatchObject([{ incarnation: m1.incarnation, reason: "lru", outcome: "leftover" }]);
    expect(m2.done()).toBe(false);
    expect(h.n2.starts).toHaveLength(1);
    h.n2.stopScript = () => ({ t: "stopped" });
    await h.until(() => m2.done());
    expect(m2.value().phase).toBe("ready");
    expect(h.loader.core.occupancy("n2").total).toBe(1);
  });
});
