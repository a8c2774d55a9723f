import { describe, expect, it } from "vitest";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";
import type { Lease } from "./loader-types.js";
import type { FakeBackend } from "./fake-ports.js";

describe("replica scaling", () => {
  it("scales up to max under load, one load at a time, and back down to min when idle", async () => {
    const h = replicaHarness({ min: 1, max: 3, targetInFlight: 2, scaleDownAfterMs: 60_000 });
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 1); // the reconciler restores min
    expect(h.events.ofType("replica.scaled-up")).toMatchObject([{ cause: "min", replicas: 1 }]);
    h.n1.startScript = () => {}; // replica loads stay in progress until the test says
    const leases: Lease<FakeBackend>[] = [];
    for (let i = 0; i < 3; i++) leases.push(await h.loader.acquire("m1", h.never));
    // the third call found the only replica at its target: one scale-up, and the call still served
    await h.flush();
    expect(h.n1.starts).toHaveLength(2);
    for (let i = 0; i < 3; i++) leases.push(await h.loader.acquire("m1", h.never));
    await h.flush();
    expect(h.n1.starts).toHaveLength(2); // at most one scale-up in flight
    expect(new Set(leases.map((l) => l.incarnation)).size).toBe(1);
    h.n1.startOf("m1").spawned().ready();
    await h.until(() => readyReplicas(h).length === 2);
    for (let i = 0; i < 6; i++) leases.push(await h.loader.acquire("m1", h.never));
    await h.flush();
    expect(h.n1.starts).toHaveLength(3);
    h.n1.startOf("m1").spawned().ready();
    await h.until(() => readyReplicas(h).length === 3);
    for (let i = 0; i < 10; i++) leases.push(await h.loader.acquire("m1", h.never));
    await h.flush();
    expect(h.n1.starts).toHaveLength(3); // never above max
    expect(h.events.ofType("replica.scaled-up").map((e) => [e.cause, e.replicas])).toEqual([
      ["min", 1],
      ["in-flight", 2],
      ["in-flight", 3],
    ]);
    expect(h.loader.replicaStatus("m1")).toMatchObject({ ready: 3, desired: 3 });
    for (const l of leases) l.complete();
    await h.run(59_000);
    expect(readyReplicas(h)).toHaveLength(3); // not idle long enough
    await h.until(() => readyReplicas(h).length === 1 && h.loader.heldInstances().length === 1, 10 * 60_000);
    await h.run(10 * 60_000);
    expect(readyReplicas(h)).toHaveLength(1); // min is kept
    const down = h.events.ofType("replica.scaled-down");
    expect(down.map((e) => e.replicas)).toEqual([2, 1]);
    const stops = h.events.ofType("eviction.started").filter((e) => e.reason === "scale-down");
    expect(stops.map((e) => e.incarnation)).toEqual(down.map((e) => e.incarnation));
    expect(stops.every((e) => !e.force)).toBe(true);
    h.loader.close();
  });

  it("the last replica of a min-0 model is never scaled down (it is the idle watchdog's)", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1, scaleDownAfterMs: 1_000 });
    h.loader.startTicking();
    const l = await h.loader.acquire("m1", h.never);
    l.complete();
    await h.run(60_000);
    expect(readyReplicas(h)).toHaveLength(1);
    expect(h.events.ofType("replica.scaled-down")).toHaveLength(0);
    h.loader.close();
  });

  it("the idle watchdog never takes a model below min, and a per-model idle timeout 0 means never", async () => {
    const h = replicaHarness({ min: 1, max: 2 }, { policy: { idleCheck: true, idleTimeoutMs: 1_000 } });
    await Promise.all(h.loader.setModels(h.loader.modelSpecs().map((m) => (m.id === "m3" ? { ...m, idleTimeoutMs: 0 } : m.id === "m4" ? { ...m, idleTimeoutMs: 120_000 } : m))));
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 1);
    const m1 = readyReplicas(h)[0];
    for (const id of ["m2", "m3", "m4"]) (await h.loader.acquire(id, h.never)).complete();
    await h.run(30_000);
    expect(readyReplicas(h)).toEqual([m1]); // floor: not idle-evicted
    expect(readyReplicas(h, "m2")).toHaveLength(0); // the policy's idle timeout
    expect(readyReplicas(h, "m3")).toHaveLength(1); // 0 = never
    expect(readyReplicas(h, "m4")).toHaveLength(1); // its own, longer timeout
    await h.run(120_000);
    expect(readyReplicas(h, "m4")).toHaveLength(0);
    expect(readyReplicas(h, "m3")).toHaveLength(1);
    expect(h.events.ofType("eviction.started").filter((e) => e.model === "m1")).toHaveLength(0);
    h.loader.close();
  });

  it("a min that cannot be placed opens the breaker, which backs off exponentially and closes on success", async () => {
    const h = replicaHarness({ min: 1, max: 1 }, { enforcement: { maxAttempts: 1, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined; // no node fits
    h.loader.startTicking();
    await h.until(() => h.events.ofType("replica.scale-blocked").length === 1);
    const t0 = h.clock.now();
    expect(h.events.ofType("replica.scale-blocked")[0]).toMatchObject({ model: "m1", failures: 1, retryAfterMs: 10_000 });
    expect(h.loader.replicaStatus("m1")?.blocked).toMatchObject({ failures: 1, retryAtMs: t0 + 10_000 });
    const asked = h.placement.calls.length;
    await h.run(9_000);
    expect(h.placement.calls.length).toBe(asked); // backing off: no attempt
    await h.until(() => h.events.ofType("replica.scale-blocked").length === 2);
    expect(h.events.ofType("replica.scale-blocked")[1]).toMatchObject({ failures: 2, retryAfterMs: 20_000 });
    expect(h.clock.now() - t0).toBeGreaterThanOrEqual(10_000);
    h.placement.defaultNode = "n1"; // a node joins
    await h.until(() => readyReplicas(h).length === 1, 60_000);
    expect(h.loader.replicaStatus("m1")?.blocked).toBeUndefined();
    expect(h.events.ofType("replica.scale-blocked")).toHaveLength(2);
    h.loader.close();
  });
});
