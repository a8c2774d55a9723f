import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { createHarness, defaultModels, rejection, type Harness } from "./test-fakes.js";

/** The watchdog has nothing for the incarnation, the loader holds nothing, and the node has no occupancy left. */
function expectNothingLeftBehind(h: Harness, incarnation: string, nodeId = "n1"): void {
  expect(h.loader.core.instance(incarnation)).toBeUndefined();
  expect(h.loader.heldInstance(incarnation)).toBeUndefined();
  expect(h.loader.core.occupancy(nodeId).total).toBe(0);
  expect(h.loader.loadingCount).toBe(0);
}

describe("Loader loads", () => {
  it("a successful load ends ready, in the watchdog and in the loader, and emits backend.loaded", async () => {
    const h = createHarness();
    const inst = await h.loader.ensureLoaded("m1", h.never);
    expect(inst.phase).toBe("ready");
    expect(inst.placement).toBe("local");
    expect(h.loader.core.instance(inst.incarnation)?.state).toBe("ready");
    expect(h.loader.hasModelAtAddress("m1", inst.address ?? "", inst.incarnation)).toBe(true);
    expect(h.n1.starts).toHaveLength(1);
    expect(h.events.ofType("backend.loaded")).toMatchObject([{ model: "m1", nodeId: "n1", incarnation: inst.incarnation, address: inst.address }]);
    // a second call is a cache hit: no second start
    expect(await h.loader.ensureLoaded("m1", h.never)).toBe(inst);
    expect(h.n1.starts).toHaveLength(1);
  });

  it("hasModelAtAddress is true while the load is in progress (spawned, loading) and once ready", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const s = h.n1.startOf("m1");
    expect(h.loader.hasModelAtAddress("m1", s.address, s.incarnation)).toBe(false); // no address yet
    expect(h.loader.core.instance(s.incarnation)?.state).toBe("reserved");
    s.spawned();
    await h.flush();
    expect(h.loader.core.instance(s.incarnation)?.state).toBe("loading");
    expect(h.loader.hasModelAtAddress("m1", s.address, s.incarnation)).toBe(true);
    expect(h.loader.hasModelAtAddress("m1", s.address, "other-incarnation")).toBe(false);
    expect(h.loader.hasModelAtAddress("m2", s.address, s.incarnation)).toBe(false);
    expect(h.loader.loadingCount).toBe(1);
    s.ready();
    await h.flush();
    expect(p.value().phase).toBe("ready");
    expect(h.loader.hasModelAtAddress("m1", s.address, s.incarnation)).toBe(true);
    expect(h.loader.loadingCount).toBe(0);
  });

  it("a failed load after spawn leaves nothing behind, starts the cooldown, and emits backend.load-failed", async () => {
    const h = createHarness();
    h.n1.startScript = (s) => {
      s.spawned().failed("backend process exited with code 42", { exitCode: 42, lastStderrLine: "boom", code: "EXITED" });
    };
    const err = await rejection(h.loader.ensureLoaded("m1", h.never));
    expect(err.code).toBe(Code.FailedPrecondition);
    expect(err.rawMessage).toContain("exited with code 42");
    const inc = h.n1.starts[0]!.incarnation;
    expectNothingLeftBehind(h, inc);
    expect(h.events.ofType("backend.load-failed")).toMatchObject([{ model: "m1", incarnation: inc, code: "EXITED", exitCode: 42, lastStderrLine: "boom" }]);
    // cooldown: refused before anything is started or admitted
    const again = await rejection(h.loader.ensureLoaded("m1", h.never));
    expect(again.code).toBe(Code.ResourceExhausted);
    expect(again.details["retryAfterMs"]).toBe(10_000);
    expect(h.n1.starts).toHaveLength(1);
    expect(h.loader.core.occupancy("n1").total).toBe(0);
  });

  it("a failed load before spawn releases its reservation", async () => {
    const h = createHarness();
    h.n1.startScript = (s) => {
      s.failed("backend not found: sim", { code: "NOT_FOUND" });
    };
    await expect(h.loader.ensureLoaded("m1", h.never)).rejects.toMatchObject({ code: Code.FailedPrecondition });
    expectNothingLeftBehind(h, h.n1.starts[0]!.incarnation);
  });

  it("the cooldown runs out: after retryAfterMs the loader is called again and a success clears it", async () => {
    const h = createHarness({ cooldown: { baseMs: 60, maxMs: 240 } });
    h.n1.startScript = (s) => {
      s.failed("broken");
    };
    await expect(h.loader.ensureLoaded("m1", h.never)).rejects.toMatchObject({ code: Code.FailedPrecondition });
    await h.run(30);
    await expect(h.loader.ensureLoaded("m1", h.never)).rejects.toMatchObject({ code: Code.ResourceExhausted, details: { model: "m1", retryAfterMs: 30 } });
    await h.run(30);
    h.n1.startScript = (s) => {
      s.spawned().ready();
    };
    const inst = await h.loader.ensureLoaded("m1", h.never);
    expect(h.n1.starts).toHaveLength(2);
    expect(await h.loader.ensureLoaded("m1", h.never)).toBe(inst);
  });

  it("5 concurrent loads of one model coalesce into one start and all get the same instance", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const calls = Array.from({ length: 5 }, () => h.track(h.loader.ensureLoaded("m1", h.never)));
    await h.flush();
    expect(h.n1.starts).toHaveLength(1);
    expect(h.loader.loadingCount).toBe(1);
    h.n1.startOf("m1").spawned().ready();
    await h.flush();
    const first = calls[0]!.value();
    for (const c of calls) expect(c.value()).toBe(first);
    expect(h.loader.loadingCount).toBe(0);
    expect(h.events.ofType("backend.loaded")).toHaveLength(1);
  });

  it("concurrent loads of different models each start once", async () => {
    const h = createHarness();
    const all = await Promise.all(["m1", "m2", "m3"].map((m) => h.loader.ensureLoaded(m, h.never)));
    expect(new Set(all.map((i) => i.incarnation)).size).toBe(3);
    expect(h.n1.starts.map((s) => s.request.model)).toEqual(["m1", "m2", "m3"]);
  });

  it("a failed leader gives its followers exactly one shared retry, which bypasses the cooldown", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const leader = h.track(h.loader.ensureLoaded("m1", h.never));
    const followers = Array.from({ length: 4 }, () => h.track(h.loader.ensureLoaded("m1", h.never)));
    await h.flush();
    expect(h.n1.starts).toHaveLength(1);
    h.n1.starts[0]!.failed("first attempt failed");
    await h.flush();
    expect(leader.error().code).toBe(Code.FailedPrecondition);
    // the followers' single retry: one more start, although m1 is in cooldown now
    expect(h.n1.starts).toHaveLength(2);
    expect(followers.some((f) => f.done())).toBe(false);
    h.n1.starts[1]!.spawned().ready();
    await h.flush();
    const inst = followers[0]!.value();
    for (const f of followers) expect(f.value()).toBe(inst);
    expect(h.n1.starts).toHaveLength(2);
  });

  it("when the followers' shared retry fails too, they all fail and no third start is made", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const leader = h.track(h.loader.ensureLoaded("m1", h.never));
    const followers = Array.from({ length: 3 }, () => h.track(h.loader.ensureLoaded("m1", h.never)));
    await h.flush();
    h.n1.starts[0]!.failed("first");
    await h.flush();
    h.n1.starts[1]!.failed("second");
    await h.flush();
    expect(leader.error().code).toBe(Code.FailedPrecondition);
    for (const f of followers) expect(f.error().rawMessage).toContain("second");
    expect(h.n1.starts).toHaveLength(2);
    // and a new caller now meets the cooldown
    const late = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    expect(late.error().code).toBe(Code.ResourceExhausted);
  });

  it("a load past its deadline fails with DEADLINE_EXCEEDED; the spawned process is accounted as a leftover at once, stopped, and reaped", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" ? modelSpec({ ...m, loadTimeoutMs: 1_000 }) : m));
    const h = createHarness({ models });
    h.n1.startScript = (s) => {
      s.spawned();
    };
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(999);
    expect(p.done()).toBe(false);
    await h.run(1);
    expect(p.error().code).toBe(Code.DeadlineExceeded);
    const s = h.n1.starts[0]!;
    expect(s.signal.aborted).toBe(true);
    // No gap: the abandoned process counts on its node until it is confirmed gone.
    expect(h.loader.core.occupancy("n1").leftovers).toBe(1);
    await h.run(2_000);
    expectNothingLeftBehind(h, s.incarnation);
    expect(h.n1.stopsOf(s.incarnation)).toMatchObject([{ address: s.address, force: true }]);
    expect(h.n1.running.has(s.incarnation)).toBe(false);
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.events.ofType("backend.load-failed")).toHaveLength(1);
    expect(h.events.ofType("leftover.reaped")).toHaveLength(1);
  });

  it("a hung load whose stop fails is tracked as a leftover, never forgotten", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" ? modelSpec({ ...m, loadTimeoutMs: 1_000 }) : m));
    const h = createHarness({ models });
    h.n1.startScript = (s) => {
      s.spawned();
    };
    h.n1.stopScript = () => new WardenError(Code.Unavailable, "agent unreachable");
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(1_000);
    expect(p.error().code).toBe(Code.DeadlineExceeded);
    const inc = h.n1.starts[0]!.incarnation;
    expect(h.loader.leftoverList().map((l) => l.incarnation)).toEqual([inc]);
    expect(h.loader.core.occupancy("n1").leftovers).toBe(1);
  });

  it("a placement no node can ever take (ready nodes judged it) fails at once with FAILED_PRECONDITION naming the reason: one attempt, no retries", async () => {
    const h = createHarness({ enforcement: { maxAttempts: 3, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined;
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    expect(p.error().code).toBe(Code.FailedPrecondition);
    expect(p.error().rawMessage).toContain("no node fits");
    expect(h.placement.calls).toHaveLength(1);
    expect(h.n1.starts).toHaveLength(0);
  });

  it("a placement that finds no node ready (none registered, all unreachable) fails UNAVAILABLE after loadWait, not after the retries: a transient state, not the model's", async () => {
    const h = createHarness({ enforcement: { maxAttempts: 30, intervalMs: 1_000 }, loadWaitMs: 2_000 });
    h.placement.defaultNode = undefined;
    h.placement.noReadyNode = true;
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(10_000);
    expect(p.error().code).toBe(Code.Unavailable);
    expect(p.error().rawMessage).toContain("no node is registered");
    expect(p.error().details["reason"]).toBe("no node is registered");
    // Attempts at 0, 1 s and 2 s (loadWait), not 30 (enforcementRetries).
    expect(h.placement.calls).toHaveLength(3);
  });

  it("no node fits while the journal expects instances on nodes not reported yet (a takeover): UNAVAILABLE", async () => {
    const h = createHarness({ enforcement: { maxAttempts: 2, intervalMs: 1_000 }, loadWaitMs: 2_000 });
    h.placement.defaultNode = undefined;
    h.loader.journalReplicas.restore([{ nodeId: "n9", model: "m2", incarnation: "m2-journaled", address: "127.0.0.1:1" }]);
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(10_000);
    expect(p.error().code).toBe(Code.Unavailable);
  });

  it("an unconfigured model is NOT_FOUND", async () => {
    const h = createHarness();
    await expect(h.loader.ensureLoaded("nope", h.never)).rejects.toMatchObject({ code: Code.NotFound });
  });
});

describe("a load of a loaded model (cache hit)", () => {
  it("refreshes its last-used, as LocalAI's UpdateLastUsed does, so LRU spares it", async () => {
    const h = createHarness({ policy: { limitPerNode: 2 } });
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    await h.run(1_000);
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    await h.run(1_000);
    const before = h.loader.core.instance(m1.incarnation)?.lastUsedMs;
    expect(await h.loader.ensureLoaded("m1", h.never)).toBe(m1);
    expect(h.loader.core.instance(m1.incarnation)?.lastUsedMs).toBe(h.clock.now());
    expect(h.loader.core.instance(m1.incarnation)?.lastUsedMs).toBeGreaterThan(before ?? Number.POSITIVE_INFINITY);
    // m2 is now the least recently used: a third model evicts it, not m1
    await h.loader.ensureLoaded("m3", h.never);
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: m2.incarnation, reason: "lru", trigger: "m3" }]);
    expect(h.loader.core.instance(m1.incarnation)?.state).toBe("ready");
  });
});

describe("admission with limitPerNode 1", () => {
  it("m1 ready, load m2: m1 is evicted (reason lru, trigger m2) before m2 starts, then m2 is ready", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.loader.core.instance(m2.incarnation)?.state).toBe("ready");
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: m1.incarnation, reason: "lru", trigger: "m2", force: false }]);
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: m1.incarnation, reason: "lru" }]);
    // m1 was stopped before m2 was started
    expect(h.log.indexOf(`stop ${m1.incarnation}`)).toBeLessThan(h.log.indexOf(`start m2 ${m2.incarnation}`));
    expect(h.loader.core.occupancy("n1").total).toBe(1);
  });

  it("scenario 82 improved: with m1 still loading, m2 waits through need-more until m1 is ready, then evicts it", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    h.n1.startScript = (s) => {
      if (s.request.model === "m1") s.spawned();
      else s.spawned().ready();
    };
    const m1 = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const s1 = h.n1.startOf("m1");
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(5_000);
    // LRU never selected the loading m1, and m2 did not start next to it
    expect(h.events.ofType("eviction.started")).toHaveLength(0);
    expect(h.n1.starts).toHaveLength(1);
    expect(m2.done()).toBe(false);
    s1.ready();
    await h.flush();
    expect(m1.value().phase).toBe("ready");
    await h.run(1_000);
    expect(m2.value().phase).toBe("ready");
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: s1.incarnation, reason: "lru" }]);
    expect(h.loader.core.instance(s1.incarnation)).toBeUndefined();
    expect(h.n1.starts).toHaveLength(2);
  });

  it("a busy instance in the way: not now — a waiting job naming busy, UNAVAILABLE after loadWait (not enforcementRetries), nothing reserved", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 }, enforcement: { maxAttempts: 3, intervalMs: 1_000 }, loadWaitMs: 6_000 });
    const lease = await h.loader.acquire("m1", h.never);
    const p = h.track(h.loader.ensureLoaded("m2", h.never));
    // Past the 3 enforcement retries, still waiting: the wait is loadWait.
    await h.run(4_000);
    expect(p.done()).toBe(false);
    expect(h.loader.loadJob("m2")).toMatchObject({ t: "waiting", phase: "waiting_for_node", reason: expect.stringContaining("busy") as unknown });
    await h.run(6_000);
    expect(p.error().code).toBe(Code.Unavailable);
    expect(p.error().rawMessage).toMatch(/waited 6s/);
    expect(p.error().rawMessage).toContain("busy");
    expect(h.loader.loadJob("m2")).toMatchObject({ t: "failed", code: "UNAVAILABLE" });
    expect(h.n1.starts).toHaveLength(1);
    expect(h.loader.core.occupancy("n1").total).toBe(1);
    expect(h.loader.core.instance(lease.incarnation)?.state).toBe("ready");
    lease.complete();
  });

  it("a loading instance in the way: UNAVAILABLE naming loading after loadWait", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 }, enforcement: { maxAttempts: 3, intervalMs: 1_000 }, loadWaitMs: 3_000 });
    h.n1.startScript = (s) => {
      s.spawned();
    };
    h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    const p = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(10_000);
    expect(p.error().code).toBe(Code.Unavailable);
    expect(p.error().rawMessage).toContain("loading");
    expect(h.n1.starts).toHaveLength(1);
  });

  it("a cooldown refusal evicts nothing", async () => {
    const h = createHarness({ policy: { limitPerNode: 1 } });
    h.n1.startScript = (s) => {
      if (s.request.model === "m2") s.failed("broken");
      else s.spawned().ready();
    };
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    // the first m2 attempt evicts m1 and then fails
    await expect(h.loader.ensureLoaded("m2", h.never)).rejects.toMatchObject({ code: Code.FailedPrecondition });
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    const m1b = await h.loader.ensureLoaded("m1", h.never);
    const started = h.events.ofType("eviction.started").length;
    await expect(h.loader.ensureLoaded("m2", h.never)).rejects.toMatchObject({ code: Code.ResourceExhausted });
    expect(h.events.ofType("eviction.started")).toHaveLength(started);
    expect(h.loader.core.instance(m1b.incarnation)?.state).toBe("ready");
  });

  it("group conflict: loading a model evicts a ready model sharing its group", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" || m.id === "m2" ? modelSpec({ ...m, groups: ["gpu0"] }) : m));
    const h = createHarness({ models });
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const m3 = await h.loader.ensureLoaded("m3", h.never);
    await h.loader.ensureLoaded("m2", h.never);
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: m1.incarnation, reason: "group", trigger: "m2" }]);
    expect(h.loader.core.instance(m3.incarnation)?.state).toBe("ready");
  });
});
