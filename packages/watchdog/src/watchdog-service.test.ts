import { describe, expect, it } from "vitest";
import { createFixture, flush } from "./watchdog-fixture.js";

describe("the async facade", () => {
  it("ticks never await stops: a stop that never answers does not block the next tick", () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 10 });
    f.reg("a1", "m1");
    f.reg("a2", "m2");
    f.port.manual = true;
    f.clock.advance(20);
    const first = f.svc.tick();
    expect(first.decision.stops).toHaveLength(2);
    expect(f.svc.stopsInFlight).toBe(2);
    f.clock.advance(20);
    expect(f.svc.tick().decision.stops).toHaveLength(0);
  });

  it("stops are single-flight per instance: a tick victim and an explicit stop share one call and one settle", async () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 10 });
    const inc = f.reg("a1", "m1");
    f.port.manual = true;
    f.clock.advance(20);
    const t = f.svc.tick();
    const explicit = f.svc.stop(inc, { reason: "admin", force: true });
    expect(f.port.calls).toHaveLength(1);
    f.port.release(inc);
    const [fromTick] = await Promise.all(t.settled);
    const fromExplicit = await explicit;
    expect(fromExplicit).toEqual({ t: "settled", report: fromTick });
    expect(f.settles).toHaveLength(1);
  });

  it("an enforcement on behalf of a load resolves only when every victim it selected has settled", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.reg("a1", "m1");
    f.reg("a2", "m2");
    f.reg("a3", "m3");
    f.port.manual = true;
    let resolved = false;
    const p = f.svc.admit({ nodeId: "n1", model: "m4", incarnation: "m4" }).then((r) => {
      resolved = true;
      return r;
    });
    const held = f.port.heldIncarnations();
    expect(held).toHaveLength(3);
    f.port.release(held[0] ?? "");
    f.port.release(held[1] ?? "", { t: "failed", message: "unavailable", freed: false });
    await flush();
    expect(resolved).toBe(false);
    f.port.release(held[2] ?? "", { t: "alreadyGone" });
    expect(await p).toMatchObject({ t: "waited", evicted: 2, needMore: true });
  });

  it("a stop port that throws or rejects is mapped to a failed outcome and still settles", async () => {
    const f = createFixture();
    const a = f.reg("a1", "m1");
    const b = f.reg("a2", "m2");
    f.port.stop = () => {
      throw new Error("sync boom");
    };
    expect(await f.svc.stop(a, { reason: "admin" })).toMatchObject({ report: { outcome: { t: "failed", message: "sync boom" }, result: { row: 3 } } });
    f.port.stop = () => Promise.reject(new Error("async boom"));
    expect(await f.svc.stop(b, { reason: "admin" })).toMatchObject({ report: { outcome: { t: "failed" }, result: { row: 3 } } });
    expect(f.svc.stopsInFlight).toBe(0);
  });

  it("whenSettled waits for every stop in flight", async () => {
    const f = createFixture({ idleCheck: true, idleTimeoutMs: 1 });
    f.reg("a1", "m1");
    f.port.manual = true;
    f.clock.advance(5);
    f.svc.tick();
    let done = false;
    const w = f.svc.whenSettled().then(() => {
      done = true;
    });
    await flush();
    expect(done).toBe(false);
    for (const i of f.port.heldIncarnations()) f.port.release(i);
    await w;
    expect(done).toBe(true);
  });

  it("admitWithRetry asks again at once after a wait without need-more, and sleeps only on need-more", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "m1-1", address: "a1" });
    const sleeps: number[] = [];
    const sleep = (ms: number): Promise<void> => {
      sleeps.push(ms);
      // The load finishes while the retry waits.
      if (sleeps.length === 2) f.core.markReady("m1-1");
      return Promise.resolve();
    };
    const r = await f.svc.admitWithRetry({ nodeId: "n1", model: "m2", incarnation: "m2-1" }, { sleep, intervalMs: 1000 });
    // loading (need-more, sleep) ×2, then m1 evicted (no need-more, no sleep), then admitted.
    expect(r).toMatchObject({ attempts: 4, last: { t: "admitted" } });
    expect(sleeps).toEqual([1000, 1000]);
    expect(f.port.models()).toEqual(["m1"]);
  });

  it("admitWithRetry gives up after the budget with the last wait", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.reg("a1", "m1");
    f.core.trackRequest("a1");
    const r = await f.svc.admitWithRetry({ nodeId: "n1", model: "m2", incarnation: "m2-1" }, { sleep: () => Promise.resolve(), maxAttempts: 3 });
    expect(r).toMatchObject({ attempts: 3, last: { t: "waited", needMore: true } });
  });

  it("an explicit stop of an instance made pending outside the facade sends no second stop", async () => {
    const f = createFixture();
    const inc = f.reg("a1", "m1");
    f.core.selectExplicit(inc, { reason: "admin" });
    expect(await f.svc.stop(inc, { reason: "admin" })).toMatchObject({ t: "pending-elsewhere", command: { incarnation: inc } });
    expect(f.port.calls).toHaveLength(0);
  });
});
