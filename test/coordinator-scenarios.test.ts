/**
 * The remaining coordinator scenarios (localai-semantics.md §6) over real
 * processes: a real coordinator with its embedded agent spawning real
 * backend-sim processes, driven over loopback gRPC. ShutdownModel →
 * UnloadModel. Nothing here asserts on elapsed time: orderings are read from
 * the event stream and from in-process snapshots taken while a step is
 * pending.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Code, isWardenError, type WardenError } from "@warden/common";
import { EvictionReason, InstanceState, UnloadOutcome, type Event } from "@warden/proto";
import { resolveCoordinatorConfig } from "@warden/coordinator";
import { liveTaggedSims, simCatalog, uniqueTag } from "./support/agent-harness.js";
import { lowPortRange } from "./support/agent-process.js";
import { simModel, startTestCoordinator, until, type TestCoordinator, type TestCoordinatorOptions } from "./support/coordinator-harness.js";

const fileTag = uniqueTag("coord-scenarios");
let t: TestCoordinator | undefined;
const dirs: string[] = [];

afterEach(async () => {
  await t?.close();
  t = undefined;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

afterAll(async () => {
  // No backend-sim started by this file is left running.
  expect(await liveTaggedSims(fileTag)).toEqual([]);
});

function start(o: TestCoordinatorOptions): Promise<TestCoordinator> {
  return startTestCoordinator({ ...o, agent: { ports: { ...lowPortRange(16), quarantine: "1s" }, catalog: { "backend-sim": simCatalog(fileTag) }, ...o.agent } });
}

async function listed(tc: TestCoordinator): Promise<[string, InstanceState][]> {
  return (await tc.admin.listModels({})).instances.map((i) => [i.model, i.state]);
}

const indexOf = (tc: TestCoordinator, pred: (e: Event) => boolean): number => tc.events.findIndex(pred);

/** Calls `check` every 20 ms until stopped; returns the violations it reported. */
function monitor(check: () => string | undefined): { stop(): Promise<string[]> } {
  const seen: string[] = [];
  const state = { on: true };
  const loop = (async () => {
    while (state.on) {
      const v = check();
      if (v !== undefined) seen.push(v);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    async stop() {
      state.on = false;
      await loop;
      return seen;
    },
  };
}

describe("coordinator scenarios (embedded agent, backend-sim processes)", { timeout: 180_000 }, () => {
  it("scenarios 53 and 54: a graceful stop of X blocked in Free does not block another model's load, and LoadModel(X) waits for it; both then succeed", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-coord-calls-"));
    dirs.push(dir);
    const calls = join(dir, "x.calls");
    // Free hangs until the loader's Free cap (stop.freeTimeout) gives up on it.
    t = await start({ models: [simModel("x", { knobs: { free: "hang", call_log: calls } }), simModel("y")], stop: { timeout: "120s", freeTimeout: "15s" } });
    const tc = t;
    const x1 = (await tc.admin.loadModel({ model: "x" })).instance?.incarnation ?? "";
    const unloadDone = { v: false };
    const unload = tc.admin.unloadModel({ model: "x" }, { timeoutMs: 150_000 }).finally(() => {
      unloadDone.v = true;
    });
    await until("X's backend is in Free", async () => (await readFile(calls, "utf8").catch(() => "")).split("\n").includes("Free"));

    // 53: another model loads and completes while X's stop is still pending
    const y = await tc.admin.loadModel({ model: "y" }, { timeoutMs: 60_000 });
    expect(y.instance?.state).toBe(InstanceState.READY);
    expect(unloadDone.v).toBe(false);
    expect((await listed(tc)).sort()).toEqual([
      ["x", InstanceState.PENDING_EVICTION],
      ["y", InstanceState.READY],
    ]);

    // 54: LoadModel(X) meanwhile does not start X's loader until the stop finished
    const early = monitor(() => {
      // x1 leaves the watchdog only when its stop settles
      if (tc.c.loader.core.instance(x1) === undefined) return undefined;
      const second = tc.c.loader.heldInstances().find((h) => h.model === "x" && h.incarnation !== x1);
      const proc = tc.c.agent?.processes().find((p) => p.model === "x" && p.incarnation !== x1);
      return second !== undefined || proc !== undefined ? "a second X started while the stop was pending" : undefined;
    });
    const reload = tc.admin.loadModel({ model: "x" }, { timeoutMs: 150_000 });
    const u = await unload;
    expect(u.outcome).toBe(UnloadOutcome.STOPPED);
    const x2 = await reload;
    expect(await early.stop()).toEqual([]);
    expect(x2.instance?.state).toBe(InstanceState.READY);
    expect(x2.instance?.incarnation).not.toBe(x1);
    await tc.waitForEvent("backend.loaded", (e) => e.incarnation === x2.instance?.incarnation);
    const stoppedAt = indexOf(tc, (e) => e.payload.case === "evictionStopped" && e.incarnation === x1);
    expect(stoppedAt).toBeGreaterThanOrEqual(0);
    expect(indexOf(tc, (e) => e.payload.case === "backendLoaded" && e.model === "y")).toBeLessThan(stoppedAt);
    expect(indexOf(tc, (e) => e.payload.case === "backendLoaded" && e.incarnation === x2.instance?.incarnation)).toBeGreaterThan(stoppedAt);
    // Free was called once, by the agent on the loader's FreeBackend (StopBackend never calls it)
    expect((await readFile(calls, "utf8")).split("\n").filter((l) => l === "Free")).toHaveLength(1);
    expect((await listed(tc)).sort()).toEqual([
      ["x", InstanceState.READY],
      ["y", InstanceState.READY],
    ]);
  });

  it("scenario 59: while a load is blocked the model is listed LOADING (one load in progress); after it, READY (none)", async () => {
    t = await start({ models: [simModel("slow", { knobs: { load_delay_ms: 2_500 } })] });
    const tc = t;
    const load = tc.admin.loadModel({ model: "slow" }, { timeoutMs: 60_000 });
    await until("listed loading", async () => (await listed(tc)).some(([m, s]) => m === "slow" && s === InstanceState.LOADING));
    expect(tc.c.loader.loadingCount).toBe(1);
    const r = await load;
    expect(r.instance?.state).toBe(InstanceState.READY);
    expect(tc.c.loader.loadingCount).toBe(0);
    expect(await listed(tc)).toEqual([["slow", InstanceState.READY]]);
  });

  it("scenario 62: a failure, then a success after the cooldown window → later loads return the cached instance, never a cooldown error", async () => {
    // backend-sim has no "fail the first load only" knob: the model's config is
    // fixed by a live reload (SIGHUP path) after the failure, as an operator would.
    t = await start({ models: [simModel("flaky", { knobs: { fail_load: "weights not there yet" } })], policy: { loadFailureCooldown: "2s" } });
    const tc = t;
    const first = await tc.admin.loadModel({ model: "flaky" }).catch((e: unknown) => e);
    expect(isWardenError(first, Code.FailedPrecondition)).toBe(true);
    expect((first as WardenError).rawMessage).toContain("weights not there yet");
    const cool = await tc.admin.loadModel({ model: "flaky" }).catch((e: unknown) => e);
    expect(isWardenError(cool, Code.ResourceExhausted)).toBe(true);

    await tc.c.reload({ ...tc.c.config, models: resolveCoordinatorConfig({ models: [simModel("flaky")] }).models });
    // after the window the loader runs again and succeeds
    const ok = await until("loaded after the cooldown window", async () => {
      try {
        return await tc.admin.loadModel({ model: "flaky" });
      } catch (e) {
        if (isWardenError(e, Code.ResourceExhausted)) return undefined;
        throw e;
      }
    });
    const inc = ok.instance?.incarnation ?? "";
    expect(ok.instance?.state).toBe(InstanceState.READY);
    for (let i = 0; i < 5; i++) {
      const again = await tc.admin.loadModel({ model: "flaky" });
      expect(again.instance?.incarnation).toBe(inc);
      const r = await tc.inference.predict({ model: "flaky", options: { Prompt: "x" } });
      expect(new TextDecoder().decode(r.reply?.message)).toContain("flaky");
    }
    // the success cleared the failure history: a fresh load after an unload is not refused either
    expect((await tc.admin.unloadModel({ model: "flaky" })).outcome).toBe(UnloadOutcome.STOPPED);
    const fresh = await tc.admin.loadModel({ model: "flaky" });
    expect(fresh.instance?.incarnation).not.toBe(inc);
    expect(tc.events.filter((e) => e.payload.case === "backendLoadFailed")).toHaveLength(1);
  });

  it("a backend killed during a call: the call sees UNAVAILABLE, the instance is removed through the watchdog and the call succeeds once on a fresh instance", async () => {
    t = await start({ models: [simModel("c", { knobs: { predict_delay_ms: 1_500 } })] });
    const tc = t;
    const first = await tc.admin.loadModel({ model: "c" });
    const inc1 = first.instance?.incarnation ?? "";
    const call = tc.inference.predict({ model: "c", options: { Prompt: "p" } }, { timeoutMs: 60_000 });
    await until("call in flight", async () => (await tc.admin.listModels({})).instances.some((i) => i.incarnation === inc1 && i.inFlight === 1));
    const pid = tc.c.agent?.processes().find((p) => p.incarnation === inc1)?.pid ?? 0;
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, "SIGKILL");
    const r = await call;
    expect(new TextDecoder().decode(r.reply?.message)).toContain("c");
    const rows = (await tc.admin.listModels({})).instances;
    expect(rows.map((i) => i.state)).toEqual([InstanceState.READY]);
    expect(rows[0]?.incarnation).not.toBe(inc1);
    expect(rows[0]?.inFlight).toBe(0);
    await tc.waitForEvent("backend.loaded", (e) => e.incarnation === rows[0]?.incarnation);
    expect(tc.events.filter((e) => e.payload.case === "backendLoaded")).toHaveLength(2);
    const removed = await tc.waitForEvent("eviction.started", (e) => e.incarnation === inc1);
    expect(removed.payload.case === "evictionStarted" && removed.payload.value.reason).toBe(EvictionReason.HEALTH);
  });

  it("scenario 82 improved: with limitPerNode 1, a loading m1 is never selected; m2 waits through need-more until m1 is ready, then m1 is evicted (lru) and m2 loads", async () => {
    t = await start({ models: [simModel("m1", { knobs: { load_delay_ms: 3_000 } }), simModel("m2")], policy: { limitPerNode: 1 } });
    const tc = t;
    const together = monitor(() => {
      const live = (tc.c.agent?.processes() ?? []).filter((p) => p.state !== "exited");
      return live.length > 1 ? `two backends at once: ${live.map((p) => `${p.model}:${p.state}`).join(", ")}` : undefined;
    });
    const load1 = tc.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 });
    await until("m1 loading", async () => (await listed(tc)).some(([m, s]) => m === "m1" && s === InstanceState.LOADING));
    const load2 = tc.admin.loadModel({ model: "m2" }, { timeoutMs: 90_000 });
    const r1 = await load1;
    expect(r1.instance?.state).toBe(InstanceState.READY);
    const r2 = await load2;
    expect(r2.instance?.state).toBe(InstanceState.READY);
    expect(await together.stop()).toEqual([]);
    const inc1 = r1.instance?.incarnation ?? "";
    await tc.waitForEvent("backend.loaded", (e) => e.model === "m2");
    const started = await tc.waitForEvent("eviction.started", (e) => e.incarnation === inc1);
    expect(started.payload.case === "evictionStarted" && started.payload.value.reason).toBe(EvictionReason.LRU);
    // m1 was selected only once ready: no failed stop (a loading victim would fail at the lifecycle lock)
    expect(tc.events.filter((e) => e.payload.case === "evictionFailed")).toEqual([]);
    expect(tc.events.filter((e) => e.payload.case === "evictionStarted")).toHaveLength(1);
    const loaded1 = indexOf(tc, (e) => e.payload.case === "backendLoaded" && e.incarnation === inc1);
    const evicting = indexOf(tc, (e) => e.payload.case === "evictionStarted" && e.incarnation === inc1);
    const stopped = indexOf(tc, (e) => e.payload.case === "evictionStopped" && e.incarnation === inc1);
    const loaded2 = indexOf(tc, (e) => e.payload.case === "backendLoaded" && e.model === "m2");
    expect(loaded1).toBeGreaterThanOrEqual(0);
    expect(loaded1).toBeLessThan(evicting);
    expect(evicting).toBeLessThan(stopped);
    expect(stopped).toBeLessThan(loaded2);
    expect(await listed(tc)).toEqual([["m2", InstanceState.READY]]);
  });
});
