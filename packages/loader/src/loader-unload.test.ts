import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { createHarness, defaultModels, deferred, rejection } from "./test-fakes.js";

const unavailable = () => new WardenError(Code.Unavailable, "connection refused");

describe("unload meets the lifecycle lock and the busy wait", () => {
  it("unload of a model still loading with a short stopTimeoutMs → DEADLINE_EXCEEDED with the lock message; the load completes ready", async () => {
    const h = createHarness();
    h.n1.startScript = (s) => {
      s.spawned();
    };
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const s = h.n1.startOf("m1");
    const unload = h.track(h.loader.unload("m1", { force: false, stopTimeoutMs: 200 }));
    await h.run(199);
    expect(unload.done()).toBe(false);
    await h.run(1);
    expect(unload.error().code).toBe(Code.DeadlineExceeded);
    expect(unload.error().rawMessage).toBe('waiting to shut down model "m1": context deadline exceeded');
    // nothing was dropped or sent
    expect(h.n1.stops).toHaveLength(0);
    expect(h.journal.records).toHaveLength(0);
    expect(h.loader.core.instance(s.incarnation)).toMatchObject({ state: "loading", pendingEviction: undefined });
    expect(h.events.ofType("eviction.failed")).toMatchObject([{ outcome: "registered-again" }]);
    s.ready();
    await h.flush();
    expect(load.value().phase).toBe("ready");
    expect(h.loader.core.instance(s.incarnation)?.state).toBe("ready");
    expect(h.loader.snapshot().instances.map((i) => i.model)).toEqual(["m1"]);
  });

  it("a graceful unload of a busy model with a short timeout → DEADLINE_EXCEEDED 'model is still busy', model still listed and routable", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const unload = h.track(h.loader.unload("m1", { force: false, stopTimeoutMs: 250 }));
    await h.run(250);
    expect(unload.error().code).toBe(Code.DeadlineExceeded);
    expect(unload.error().rawMessage).toBe("model is still busy: m1: context deadline exceeded");
    expect(h.frees.callsAt(lease.address)).toBe(0);
    expect(h.n1.stops).toHaveLength(0);
    expect(h.loader.core.instance(lease.incarnation)).toMatchObject({ state: "ready", inFlight: 1, pendingEviction: undefined });
    expect(h.loader.snapshot().instances.map((i) => i.incarnation)).toEqual([lease.incarnation]);
    lease.complete();
    const next = await h.loader.acquire("m1", h.never);
    expect(next.incarnation).toBe(lease.incarnation);
    next.complete();
  });

  it("a graceful unload waits for the busy instance to become idle within the deadline, then stops it", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const unload = h.track(h.loader.unload("m1", { force: false, stopTimeoutMs: 1_000 }));
    await h.run(300);
    expect(unload.done()).toBe(false);
    lease.complete();
    await h.run(100);
    expect(unload.value()).toEqual({ t: "stopped", incarnation: lease.incarnation });
    expect(h.frees.callsAt(lease.address)).toBe(1);
  });

  it("a force unload of a busy model stops it without Free and without waiting", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    expect(unload.value()).toEqual({ t: "stopped", incarnation: lease.incarnation });
    expect(h.frees.callsAt(lease.address)).toBe(0);
    expect(h.n1.stopsOf(lease.incarnation)).toMatchObject([{ force: true }]);
    expect(h.events.ofType("eviction.started")).toMatchObject([{ wasBusy: true, force: true }]);
    expect(h.loader.core.instance(lease.incarnation)).toBeUndefined();
    // the late completion is a harmless no-op
    lease.complete();
    expect(h.loader.core.inFlight(lease.address)).toBe(0);
  });

  it("a load of the model waits behind a graceful stop blocked in Free, then starts afresh (scenario 54)", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<undefined>();
    h.frees.script = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: false }));
    await h.flush();
    const again = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    expect(h.n1.starts).toHaveLength(1);
    expect(again.done()).toBe(false);
    gate.resolve(undefined);
    await h.flush();
    expect(unload.value().t).toBe("stopped");
    expect(again.value().incarnation).not.toBe(m1.incarnation);
    expect(h.n1.starts).toHaveLength(2);
  });
});

describe("remote-only unload (a model the loader does not hold)", () => {
  it("inventories answer absent → not-loaded, nothing sent", async () => {
    const h = createHarness();
    expect(await h.loader.unload("m1", { force: false })).toEqual({ t: "not-loaded" });
    expect(h.inventory.asked).toEqual(["m1"]);
    expect(h.n1.stops.length + h.n2.stops.length).toBe(0);
  });

  it("inventories answer unknown → UNAVAILABLE (never not-found)", async () => {
    const h = createHarness();
    h.inventory.answers.set("m1", { t: "unknown", reason: 'node "n2" is unreachable' });
    const err = await rejection(h.loader.unload("m1", { force: false }));
    expect(err.code).toBe(Code.Unavailable);
    expect(err.code).not.toBe(Code.NotFound);
    expect(err.rawMessage).toContain('checking whether model "m1" is loaded on any node');
    expect(h.n2.stops).toHaveLength(0);
  });

  it("inventories answer found → StopBackend for that (address, incarnation) and stopped", async () => {
    const h = createHarness();
    h.inventory.answers.set("m1", { t: "found", hits: [{ nodeId: "n2", address: "n2:7000", incarnation: "old-1", ready: true }] });
    let heldDuringStop: boolean | undefined;
    h.n2.duringStop = () => {
      heldDuringStop = h.loader.hasModelAtAddress("m1", "n2:7000", "old-1");
    };
    expect(await h.loader.unload("m1", { force: false })).toEqual({ t: "stopped", incarnation: "old-1" });
    expect(h.n2.stops).toMatchObject([{ address: "n2:7000", incarnation: "old-1" }]);
    expect(heldDuringStop).toBe(false);
    expect(h.connector.connected).toHaveLength(0); // no client, no Free
    expect(h.loader.core.instance("old-1")).toBeUndefined();
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: "old-1", nodeId: "n2" }]);
  });

  it("found, but the stop fails → a leftover, not registered again", async () => {
    const h = createHarness();
    h.inventory.answers.set("m1", { t: "found", hits: [{ nodeId: "n2", address: "n2:7000", incarnation: "old-1", ready: true }] });
    h.n2.stopScript = unavailable;
    expect(await h.loader.unload("m1", { force: false })).toMatchObject({ t: "leftover", incarnation: "old-1" });
    expect(h.loader.core.instance("old-1")).toBeUndefined();
    expect(h.loader.leftoverList().map((l) => l.incarnation)).toEqual(["old-1"]);
  });
  it("found, but not ready there (a load nobody here drives) → a leftover, never adopted as routable (seeds 34087, 35615)", async () => {
    const h = createHarness();
    h.inventory.answers.set("m1", { t: "found", hits: [{ nodeId: "n2", address: "n2:7000", incarnation: "old-1", ready: false }] });
    h.n2.stopScript = unavailable;
    expect(await h.loader.unload("m1", { force: false })).toEqual({ t: "leftover", incarnation: "old-1", error: "not ready in the inventory; stop retried" });
    expect(h.loader.core.instance("old-1")).toBeUndefined();
    expect(h.loader.heldInstance("old-1")).toBeUndefined();
    expect(h.events.ofType("instance.adopted")).toMatchObject([{ incarnation: "old-1", asLeftover: true }]);
    // a call loads a fresh instance instead of being routed to a backend that never reported ready
    h.n1.startScript = (st) => {
      st.spawned().ready();
    };
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.until(() => call.done());
    expect(call.value().incarnation).not.toBe("old-1");
    call.value().complete();
    h.n2.stopScript = () => ({ t: "stopped" });
    await h.until(() => h.loader.leftoverList().length === 0);
    expect(h.n2.stops.every((r) => r.incarnation === "old-1")).toBe(true);
  });
});

describe("stops racing a load", () => {
  it("an unload during a start not yet spawned never cancels the load: it waits for the load, then stops the model", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const start = h.n1.starts[0]!;
    expect(h.loader.core.instance(start.incarnation)?.state).toBe("reserved");
    const unload = h.track(h.loader.unload("m1", { force: false, stopTimeoutMs: 5_000 }));
    await h.run(1_000);
    expect(unload.done()).toBe(false);
    expect(start.signal.aborted).toBe(false);
    start.spawned().ready();
    await h.flush();
    expect(load.value().phase).toBe("ready");
    expect(unload.value()).toEqual({ t: "stopped", incarnation: start.incarnation });
    expect(h.n1.stopsOf(start.incarnation)).toHaveLength(1);
    expect(h.loader.core.occupancy("n1").total).toBe(0);
    // nothing failed: no cooldown
    h.n1.startScript = (s) => {
      s.spawned().ready();
    };
    expect((await h.loader.ensureLoaded("m1", h.never)).phase).toBe("ready");
  });

  it("an unload during a start not yet spawned, past its deadline, fails with the lock message and the load completes ready", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const start = h.n1.starts[0]!;
    const unload = h.track(h.loader.unload("m1", { force: false, stopTimeoutMs: 200 }));
    await h.run(200);
    expect(unload.error().code).toBe(Code.DeadlineExceeded);
    expect(unload.error().rawMessage).toBe('waiting to shut down model "m1": context deadline exceeded');
    expect(start.signal.aborted).toBe(false);
    start.spawned().ready();
    await h.flush();
    expect(load.value().phase).toBe("ready");
    expect(h.loader.core.instance(start.incarnation)?.state).toBe("ready");
    expect(h.n1.stops).toHaveLength(0);
  });

  it("closing the loader (shutdown, or an HA leader stepping down) ends a load in progress UNAVAILABLE — a retry, not a CANCELLED the caller never asked for — without putting the model in cooldown", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    h.loader.close();
    await h.flush();
    expect(load.error().code).toBe(Code.Unavailable);
    expect(h.loader.core.occupancy("n1").total).toBe(0);
    h.n1.startScript = (s) => {
      s.spawned().ready();
    };
    expect((await h.loader.ensureLoaded("m1", h.never)).phase).toBe("ready");
  });

  it("a load that hits its deadline while an explicit stop waits for the lock is not registered again when that stop fails: it becomes a leftover", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" ? modelSpec({ ...m, loadTimeoutMs: 1_000 }) : m));
    const h = createHarness({ models, cooldown: { baseMs: 0, maxMs: 0 } });
    h.n1.startScript = (s) => {
      s.spawned();
    };
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const inc = h.n1.starts[0]!.incarnation;
    h.n1.stopScript = unavailable; // the process stays alive
    const unload = h.track(h.loader.unload("m1", { force: true, stopTimeoutMs: 5_000 }));
    await h.run(1_000);
    expect(load.error().code).toBe(Code.DeadlineExceeded);
    await h.flush();
    // the load is over: the failed stop must not register a "loading" instance that nothing will ever finish
    expect(unload.value()).toMatchObject({ t: "leftover", incarnation: inc });
    expect(h.loader.core.instance(inc)).toBeUndefined();
    expect(h.loader.heldInstance(inc)).toBeUndefined();
    expect(h.loader.leftoverList().map((l) => l.incarnation)).toEqual([inc]);
    // its stop is retried, and a new call loads a fresh instance instead of waiting forever
    h.n1.stopScript = () => ({ t: "stopped" });
    h.n1.startScript = (s) => {
      s.spawned().ready();
    };
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.until(() => call.done());
    expect(call.value().incarnation).not.toBe(inc);
    call.value().complete();
    await h.until(() => h.loader.leftoverList().length === 0);
    expect(h.events.ofType("leftover.reaped")).toMatchObject([{ incarnation: inc }]);
  });

  it("a load that hits its deadline while an explicit stop waits for the lock is stopped by that stop (row 2)", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" ? modelSpec({ ...m, loadTimeoutMs: 1_000 }) : m));
    const h = createHarness({ models });
    h.n1.startScript = (s) => {
      s.spawned();
    };
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const inc = h.n1.starts[0]!.incarnation;
    const unload = h.track(h.loader.unload("m1", { force: false, stopTimeoutMs: 5_000 }));
    await h.run(1_000);
    expect(load.error().code).toBe(Code.DeadlineExceeded);
    expect(unload.value()).toEqual({ t: "stopped", incarnation: inc });
    expect(h.n1.stopsOf(inc)).toHaveLength(1);
    expect(h.loader.core.instance(inc)).toBeUndefined();
    expect(h.loader.heldInstance(inc)).toBeUndefined();
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.loader.core.occupancy("n1").total).toBe(0);
  });
});

describe("unload reports the real outcome", () => {
  it("a drain that failed at the busy wait does not turn a later unload's StopBackend failure into a lock error", async () => {
    const h = createHarness({ stop: { stopTimeoutMs: 200 } });
    const lease = await h.loader.acquire("m1", h.never);
    const drain = h.track(h.loader.watchdog.drainNode("n1"));
    await h.run(200);
    expect(drain.value()).toMatchObject([{ t: "settled", report: { result: { row: 3 } } }]);
    lease.complete();
    h.n1.stopScript = () => new WardenError(Code.DeadlineExceeded, "StopBackend deadline exceeded");
    expect(await h.loader.unload("m1", { force: true })).toEqual({ t: "registered-again", incarnation: lease.incarnation, error: "StopBackend deadline exceeded" });
  });
});
