import { describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { LoadJobs } from "./load-jobs.js";
import { createHarness } from "./loader-harness.js";
import type { StopAnswer } from "./ports.js";
import { deferred } from "./test-fakes.js";
import { replicaHarness } from "./replica-test-kit.js";

const at = (nowMs: number): { nowMs: number; wallMs: number } => ({ nowMs, wallMs: 1_700_000_000_000 + nowMs });

describe("LoadJobs: one job per model, bounded", () => {
  it("waiting reports the transition once, keeps the latest reason; loading and done follow the same incarnation", () => {
    const j = new LoadJobs();
    expect(j.waiting("m", "i1", "waiting_for_node", "node is draining", at(0), "alice")).toBe(true);
    expect(j.waiting("m", "i1", "waiting_for_node", "node is unreachable", at(500), "alice")).toBe(false);
    expect(j.of("m", 1_000)).toMatchObject({ t: "waiting", phase: "waiting_for_node", reason: "node is unreachable", sinceMs: 0, actor: "alice" });
    j.loading("m", "i1", "n1", "starting", at(2_000), "alice");
    expect(j.of("m", 2_000)).toMatchObject({ t: "loading", phase: "starting", nodeId: "n1", sinceMs: 2_000 });
    j.loading("m", "i1", "n1", "loading", at(3_000), "alice");
    expect(j.of("m", 3_000)).toMatchObject({ t: "loading", phase: "loading" });
    // An older incarnation's end leaves a newer load alone.
    j.done("m", "i0");
    expect(j.of("m", 3_000)?.t).toBe("loading");
    j.done("m", "i1");
    expect(j.of("m", 3_000)).toBeUndefined();
    expect(j.size).toBe(0);
  });

  it("a failed job keeps the phase it failed in, is listed for failedKeepMs, then dropped; the model's next load replaces it", () => {
    const j = new LoadJobs({ failedKeepMs: 10_000 });
    j.waiting("m", "i1", "waiting_for_node", "node is draining", at(0), undefined);
    expect(j.failed("m", "i1", undefined, "cannot load now", "UNAVAILABLE", at(5_000), undefined)).toBe("waiting_for_node");
    expect(j.list(6_000)).toMatchObject([{ t: "failed", model: "m", phase: "waiting_for_node", reason: "cannot load now", code: "UNAVAILABLE", sinceMs: 5_000, sinceWallMs: 1_700_000_005_000 }]);
    expect(j.list(14_999)).toHaveLength(1);
    expect(j.list(15_000)).toEqual([]);
    j.failed("m", "i2", "n1", "exit 1", "FAILED_PRECONDITION", at(20_000), undefined);
    expect(j.waiting("m", "i3", "waiting_for_node", "node is draining", at(21_000), undefined)).toBe(true);
    expect(j.list(21_000)).toMatchObject([{ t: "waiting", incarnation: "i3" }]);
  });

  it("at most maxFailed failed jobs, the oldest dropped first; active jobs are never dropped", () => {
    const j = new LoadJobs({ maxFailed: 2 });
    j.waiting("active", "a", "waiting_for_node", "node is draining", at(0), undefined);
    for (let i = 0; i < 5; i++) j.failed(`f${String(i)}`, `i${String(i)}`, undefined, "no", "UNAVAILABLE", at(i), undefined);
    expect(j.list(10).map((x) => x.model)).toEqual(["active", "f3", "f4"]);
    expect(j.counts(10)).toEqual({ waiting: 1, loading: 0, failed: 2 });
  });
});

describe("the loader's load jobs (fake clock)", () => {
  it("a load no node can take now: job waiting with the reason and load.waiting once; after loadWait failed UNAVAILABLE, listed, with load.failed", async () => {
    const h = createHarness({ loadWaitMs: 5_000, enforcement: { maxAttempts: 30, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined;
    h.placement.noReadyNode = true;
    const p = h.track(h.loader.ensureLoaded("m1", h.never, undefined, "ops"));
    await h.run(2_000);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "waiting", phase: "waiting_for_node", reason: "no node is registered", sinceMs: 0, actor: "ops" });
    expect(h.events.ofType("load.waiting")).toMatchObject([{ model: "m1", nodeId: "", incarnation: "", reason: "no node is registered", actor: "ops" }]);
    await h.run(5_000);
    expect(p.error().code).toBe(Code.Unavailable);
    const inc = h.events.ofType("load.waiting")[0]?.loadIncarnation;
    expect(inc).not.toBe("");
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "failed", incarnation: inc, phase: "waiting_for_node", code: "UNAVAILABLE", nodeId: undefined });
    expect(h.events.ofType("load.waiting")).toHaveLength(1);
    expect(h.events.ofType("load.failed")).toMatchObject([{ model: "m1", loadIncarnation: inc, code: "UNAVAILABLE", phase: "waiting_for_node" }]);
  });

  it("a load held at the admission gate (the recovery window) is a waiting job, phase waiting_for_recovery, load.waiting once; once the gate opens it loads and the job is gone", async () => {
    let open = (): void => {};
    const h = createHarness({ admissionGate: new Promise<void>((r) => (open = r)) });
    const p = h.track(h.loader.ensureLoaded("m1", h.never, undefined, "ops"));
    await h.run(1_000);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "waiting", phase: "waiting_for_recovery", reason: expect.stringContaining("recovery window") as unknown, actor: "ops" });
    expect(h.events.ofType("load.waiting")).toHaveLength(1);
    open();
    await h.run(1_000);
    expect(p.value().phase).toBe("ready");
    expect(h.loader.loadJob("m1")).toBeUndefined();
    expect(h.events.ofType("load.waiting")).toHaveLength(1);
  });

  it("a job held at the gate that then finds no node stays one job: the phase and reason change, no second load.waiting", async () => {
    let open = (): void => {};
    const h = createHarness({ admissionGate: new Promise<void>((r) => (open = r)), loadWaitMs: 5_000 });
    h.placement.defaultNode = undefined;
    h.placement.noReadyNode = true;
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(1_000);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "waiting", phase: "waiting_for_recovery", sinceMs: 0 });
    open();
    await h.run(1_000);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "waiting", phase: "waiting_for_node", reason: "no node is registered", sinceMs: 0 });
    expect(h.events.ofType("load.waiting")).toHaveLength(1);
    await h.run(6_000);
    expect(p.error().code).toBe(Code.Unavailable);
  });

  it("an eviction then a load (victims settled, asked again at once) is not waiting: no load.waiting, no job once loaded", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    await h.loader.ensureLoaded("m1", h.never);
    await h.loader.ensureLoaded("m2", h.never);
    expect(h.events.ofType("eviction.stopped")).toHaveLength(1);
    expect(h.events.ofType("load.waiting")).toEqual([]);
    expect(h.loader.loadJob("m2")).toBeUndefined();
  });

  it("a load that waits for the model's own instance to stop is a waiting job (waiting_for_instance), load.waiting once for every caller; gone once it loads", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const gate = deferred<StopAnswer>();
    h.n1.stopScript = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    const load = h.track(h.loader.ensureLoaded("m1", h.never, undefined, "ops"));
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.run(2_000);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "waiting", phase: "waiting_for_instance", actor: "ops" });
    const job = h.loader.loadJob("m1");
    expect(job?.t === "waiting" ? job.reason : "").toContain(`its instance ${m1.incarnation} is stopping`);
    expect(h.events.ofType("load.waiting")).toHaveLength(1);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(unload.value().t).toBe("stopped");
    expect(load.value().incarnation).not.toBe(m1.incarnation);
    call.value().complete();
    expect(h.loader.loadJob("m1")).toBeUndefined();
    expect(h.events.ofType("load.waiting")).toHaveLength(1);
  });

  it("a load no node can ever take: failed at once, never waiting (no load.waiting), load.failed FAILED_PRECONDITION", async () => {
    const h = createHarness();
    h.placement.defaultNode = undefined;
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    expect(p.error().code).toBe(Code.FailedPrecondition);
    expect(h.events.types()).toEqual(["load.failed"]);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "failed", code: "FAILED_PRECONDITION", reason: 'cannot load model "m1": no node fits' });
  });

  it("a load that waited, then a node came: job loading (starting, then loading), gone once ready; no load.failed", async () => {
    const h = createHarness({ loadWaitMs: 30_000 });
    h.placement.defaultNode = undefined;
    h.placement.noReadyNode = true;
    h.n1.startScript = () => undefined; // the test drives the start
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(2_000);
    expect(h.loader.loadJob("m1")?.t).toBe("waiting");
    h.placement.defaultNode = "n1";
    await h.until(() => h.n1.starts.length === 1);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "loading", phase: "starting", nodeId: "n1" });
    h.n1.starts[0]!.spawned();
    await h.flush();
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "loading", phase: "loading" });
    h.n1.starts[0]!.ready();
    await h.flush();
    expect(p.done()).toBe(true);
    expect(h.loader.loadJob("m1")).toBeUndefined();
    expect(h.events.ofType("load.failed")).toEqual([]);
  });
});

describe("a load blocked by room with nothing to evict and nothing to wait for is 'not now'", () => {
  it("a replica load whose node's slots hold only replicas it must not evict waits loadWait as a waiting job, then fails UNAVAILABLE (not FAILED_PRECONDITION at once)", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 }, { policy: { limitPerNode: 1 }, loadWaitMs: 5_000, enforcement: { maxAttempts: 3, intervalMs: 1_000 } });
    h.placement.route.set("m1", "n1");
    const a = await h.loader.acquire("m1", h.never);
    const b = await h.loader.acquire("m1", h.never); // at target: a scale-up, its only node full of m1's own replica
    await h.run(2_000);
    const job = h.loader.loadJob("m1");
    expect(job).toMatchObject({ t: "waiting", phase: "waiting_for_node" });
    expect(job?.t === "waiting" ? job.reason : "").toContain("spared");
    await h.run(5_000);
    expect(h.loader.loadJob("m1")).toMatchObject({ t: "failed", code: "UNAVAILABLE" });
    expect(h.events.ofType("load.failed")).toMatchObject([{ model: "m1", code: "UNAVAILABLE", phase: "waiting_for_node" }]);
    a.complete();
    b.complete();
    h.loader.close();
  });
});
