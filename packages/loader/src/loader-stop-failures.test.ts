import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { createHarness, defaultModels } from "./test-fakes.js";

const unavailable = () => new WardenError(Code.Unavailable, "connection refused");

describe("the failure-point table", () => {
  it("local StopBackend fails with the process alive → row 3: registered again, still routable, intent cleared", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n1.stopScript = unavailable;
    const out = await h.loader.unload("m1", { force: true });
    expect(out).toMatchObject({ t: "registered-again", incarnation: m1.incarnation, error: "connection refused" });
    expect(h.n1.isRunningCalls).toEqual([m1.incarnation]);
    expect(h.loader.core.instance(m1.incarnation)).toMatchObject({ state: "ready", pendingEviction: undefined });
    expect(h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation)).toBe(true);
    expect(h.journal.open.size).toBe(0);
    expect(h.events.ofType("eviction.failed")).toMatchObject([{ incarnation: m1.incarnation, outcome: "registered-again", error: "connection refused" }]);
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.incarnation).toBe(m1.incarnation);
    expect(h.n1.starts).toHaveLength(1);
    lease.complete();
  });

  it("local StopBackend fails with the process already dead → row 2: stopped, nothing left", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n1.stopScript = unavailable;
    h.n1.isRunningAnswer = () => false;
    expect(await h.loader.unload("m1", { force: true })).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.journal.open.size).toBe(0);
    expect(h.events.ofType("eviction.stopped")).toHaveLength(1);
  });

  it("remote StopBackend fails → row 4: no watchdog instance, a leftover that keeps its intent, eviction.failed(leftover)", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    const out = await h.loader.unload("m1", { force: false });
    expect(out).toMatchObject({ t: "leftover", incarnation: m1.incarnation, error: "connection refused" });
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.loader.leftoverList()).toMatchObject([{ incarnation: m1.incarnation, nodeId: "n2", model: "m1", address: m1.address }]);
    expect(h.loader.core.occupancy("n2")).toMatchObject({ leftovers: 1, ready: 0, total: 1 });
    expect(h.journal.open.has(m1.incarnation)).toBe(true);
    expect(h.events.ofType("eviction.failed")).toMatchObject([{ incarnation: m1.incarnation, outcome: "leftover", terminalReason: "instance-dropped" }]);
    // the leftover is never routed to: a call loads a fresh instance
    h.n2.stopScript = () => ({ t: "stopped" });
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.incarnation).not.toBe(m1.incarnation);
    lease.complete();
  });

  it("a remote leftover blocks a load of another model on its node (limitPerNode 1) until reaped, then the load proceeds", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    h.placement.route.set("m1", "n2");
    h.placement.route.set("m2", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    expect((await h.loader.unload("m1", { force: true })).t).toBe("leftover");
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(5_000);
    expect(m2.done()).toBe(false);
    expect(h.n2.starts.filter((s) => s.request.model === "m2")).toHaveLength(0);
    // leftover retries at 1 s, 3 s (from its creation) failed
    expect(h.events.ofType("eviction.retried").length).toBeGreaterThanOrEqual(2);
    h.n2.stopScript = () => ({ t: "stopped" });
    await h.until(() => m2.done());
    expect(m2.value().phase).toBe("ready");
    expect(h.events.ofType("leftover.reaped")).toMatchObject([{ incarnation: m1.incarnation, nodeId: "n2" }]);
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.journal.open.has(m1.incarnation)).toBe(false);
    // reaped before m2 was started
    expect(h.log.indexOf(`event leftover.reaped ${m1.incarnation}`)).toBeLessThan(h.log.indexOf(`start m2 ${m2.value().incarnation}`));
  });

  it("scenario 81 adapted: a remote leftover in a conflicting group blocks the conflicting load until reaped", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" || m.id === "m2" ? modelSpec({ ...m, groups: ["gpu0"] }) : m));
    const h = createHarness({ models });
    h.placement.route.set("m1", "n2");
    h.placement.route.set("m2", "n2");
    h.placement.route.set("m3", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    expect((await h.loader.unload("m1", { force: true })).t).toBe("leftover");
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    // an unrelated model is not blocked
    await h.loader.ensureLoaded("m3", h.never);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(5_000);
    expect(m2.done()).toBe(false);
    h.n2.stopScript = () => ({ t: "stopped" });
    await h.until(() => m2.done());
    expect(m2.value().phase).toBe("ready");
    expect(h.events.ofType("leftover.reaped")).toHaveLength(1);
  });

  it("a freed instance (Free ok, local StopBackend failed) is not routable and is retried until stopped", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n1.stopScript = unavailable;
    const out = await h.loader.unload("m1", { force: false });
    expect(out.t).toBe("registered-again");
    expect(h.frees.callsAt(m1.address!)).toBe(1);
    expect(h.loader.core.instance(m1.incarnation)?.state).toBe("freed");
    // a call for the freed model waits (no second copy) until the retry settles
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.flush();
    expect(call.done()).toBe(false);
    // first retry fails too (still freed), the next one succeeds
    await h.run(1_000);
    expect(h.n1.stopsOf(m1.incarnation)).toHaveLength(2);
    expect(h.n1.stopsOf(m1.incarnation)[1]).toMatchObject({ force: true });
    expect(h.loader.core.instance(m1.incarnation)?.state).toBe("freed");
    expect(h.n1.starts).toHaveLength(1);
    h.n1.stopScript = () => ({ t: "stopped" });
    await h.until(() => h.loader.core.instance(m1.incarnation) === undefined);
    expect(h.n1.stopsOf(m1.incarnation)).toHaveLength(3);
    // retries never call Free again
    expect(h.frees.callsAt(m1.address!)).toBe(1);
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: m1.incarnation }]);
    await h.until(() => call.done());
    expect(call.value().incarnation).not.toBe(m1.incarnation);
    call.value().complete();
    // no more retries once stopped
    await h.run(120_000);
    expect(h.n1.stopsOf(m1.incarnation)).toHaveLength(3);
  });
});
