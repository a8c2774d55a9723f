/**
 * The coordinator's control plane over real processes: a real coordinator
 * with its embedded agent spawning real backend-sim processes, driven over
 * real loopback gRPC. Scenario numbers are localai-semantics.md §6, mapped to
 * Warden's API (ShutdownModelContext → UnloadModel with a deadline).
 *
 * No Warden meaning, so no test (a test that cannot fail is worse than none):
 * 45 (joining ModelPath with a relative file: Warden passes ModelFile through
 * to the agent untouched), 49 (a 30 s health-cache TTL: Warden routes on the
 * watchdog's state and heartbeats, it has no cache to expire), 67 (an
 * unloader without a presence check: Warden always asks the inventories) and
 * 70 (a custom model store: Warden's loader is the only store). 66 (presence
 * check errors) belongs to the cluster issue.
 */
import { afterEach, describe, expect, it } from "vitest";
import { Code, isWardenError, parseDurationMs, WardenError } from "@warden/common";
import { InferenceService, InstanceState, UnloadOutcome } from "@warden/proto";
import { createClient } from "@warden/grpc";
import { parseCoordinatorConfig } from "@warden/coordinator";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

let t: TestCoordinator | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

const text = (b: Uint8Array | undefined): string => new TextDecoder().decode(b);

async function listed(tc: TestCoordinator): Promise<{ model: string; state: InstanceState; incarnation: string; inFlight: number }[]> {
  return (await tc.admin.listModels({})).instances.map((i) => ({ model: i.model, state: i.state, incarnation: i.incarnation, inFlight: i.inFlight }));
}

describe("coordinator control plane (embedded agent, backend-sim processes)", () => {
  it("scenario 46 and 50: a loaded model is listed ready and routable; after UnloadModel it is gone", async () => {
    t = await startTestCoordinator({ models: [simModel("m1")] });
    const loaded = await t.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 });
    expect(loaded.instance?.state).toBe(InstanceState.READY);
    const again = await t.admin.loadModel({ model: "m1" });
    expect(again.instance?.incarnation).toBe(loaded.instance?.incarnation);
    const r = await t.inference.predict({ model: "m1", options: { Prompt: "hi" } });
    expect(text(r.reply?.message)).toContain("m1");
    const u = await t.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.STOPPED);
    expect(await listed(t)).toEqual([]);
    expect((await t.admin.unloadModel({ model: "m1" })).outcome).toBe(UnloadOutcome.NOT_LOADED);
  });

  it("scenario 47 and 61: a failed load leaves nothing behind, then the cooldown refuses before anything is evicted", async () => {
    t = await startTestCoordinator({ models: [simModel("broken", { knobs: { fail_load: "weights missing" } }), simModel("ok")], policy: { loadFailureCooldown: "30s" } });
    await t.admin.loadModel({ model: "ok" });
    const err = await t.admin.loadModel({ model: "broken" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.FailedPrecondition)).toBe(true);
    expect((err as WardenError).rawMessage).toContain("weights missing");
    expect((await listed(t)).map((i) => i.model)).toEqual(["ok"]);
    const cool = await t.admin.loadModel({ model: "broken" }).catch((e: unknown) => e);
    expect(isWardenError(cool, Code.ResourceExhausted)).toBe(true);
    expect((cool as WardenError).rawMessage).toMatch(/cooldown; retry after \d+ms/);
    await t.waitForEvent("backend.load-failed");
    expect(t.events.filter((e) => e.payload.case === "backendLoadFailed")).toHaveLength(1);
    expect(t.events.filter((e) => e.payload.case === "evictionStarted")).toHaveLength(0);
  });

  it("scenario 57: five concurrent loads of one model start it once and all get the same instance", async () => {
    t = await startTestCoordinator({ models: [simModel("m1", { knobs: { load_delay_ms: 300 } })] });
    const tc = t;
    const rs = await Promise.all(Array.from({ length: 5 }, () => tc.admin.loadModel({ model: "m1" })));
    expect(new Set(rs.map((r) => r.instance?.incarnation)).size).toBe(1);
    await t.waitForEvent("backend.loaded");
    expect(t.c.agent?.processes().filter((p) => p.model === "m1")).toHaveLength(1);
    expect(t.events.filter((e) => e.payload.case === "backendLoaded")).toHaveLength(1);
  });

  it("scenario 58: three concurrent loads of different models all load", async () => {
    t = await startTestCoordinator({ models: [simModel("a"), simModel("b"), simModel("c")] });
    const tc = t;
    await Promise.all(["a", "b", "c"].map((m) => tc.admin.loadModel({ model: m })));
    expect((await listed(t)).map((i) => i.model).sort()).toEqual(["a", "b", "c"]);
  });

  it("grouped models evict each other through Predict alone", async () => {
    t = await startTestCoordinator({ models: [simModel("chat-a", { groups: ["chat"] }), simModel("chat-b", { groups: ["chat"] })] });
    for (const m of ["chat-a", "chat-b", "chat-a"]) {
      const r = await t.inference.predict({ model: m, options: { Prompt: "x" } });
      expect(text(r.reply?.message)).toContain(m);
      expect((await listed(t)).map((i) => i.model)).toEqual([m]);
    }
    const started = t.events.filter((e) => e.payload.case === "evictionStarted");
    expect(started.length).toBeGreaterThanOrEqual(2);
    expect(t.events.filter((e) => e.payload.case === "evictionStopped").length).toBe(started.length);
  });

  it("scenario 52: force-unloading a permanently busy model returns stopped without Free, and another model loads after", async () => {
    t = await startTestCoordinator({ models: [simModel("busy", { knobs: { predict_delay_ms: 600_000 } }), simModel("other")] });
    await t.admin.loadModel({ model: "busy" });
    const ctl = new AbortController();
    const call = t.inference.predict({ model: "busy", options: { Prompt: "long" } }, { signal: ctl.signal }).catch((e: unknown) => e);
    await until("call in flight", async () => (await listed(t!)).find((i) => i.model === "busy" && i.inFlight === 1));
    const u = await t.admin.unloadModel({ model: "busy", force: true });
    expect(u.outcome).toBe(UnloadOutcome.STOPPED);
    const callErr = await call;
    expect(callErr).toBeInstanceOf(WardenError);
    ctl.abort();
    await t.admin.loadModel({ model: "other" });
    expect((await listed(t)).map((i) => i.model)).toEqual(["other"]);
    const started = t.events.find((e) => e.payload.case === "evictionStarted");
    expect(started?.payload.case === "evictionStarted" && started.payload.value.force).toBe(true);
  });

  it("scenario 55: a graceful unload of a busy model with a short deadline fails as busy and keeps both models listed", async () => {
    t = await startTestCoordinator({ models: [simModel("busy", { knobs: { predict_delay_ms: 600_000 } }), simModel("other")] });
    await t.admin.loadModel({ model: "busy" });
    await t.admin.loadModel({ model: "other" });
    const ctl = new AbortController();
    const call = t.inference.predict({ model: "busy", options: { Prompt: "long" } }, { signal: ctl.signal }).catch((e: unknown) => e);
    await until("call in flight", async () => (await listed(t!)).find((i) => i.model === "busy" && i.inFlight === 1));
    const err = await t.admin.unloadModel({ model: "busy", stopTimeoutMs: 300n }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect((err as WardenError).rawMessage).toBe("model is still busy: busy: context deadline exceeded");
    expect((await listed(t)).map((i) => [i.model, i.state]).sort()).toEqual([
      ["busy", InstanceState.READY],
      ["other", InstanceState.READY],
    ]);
    ctl.abort();
    await call;
    await until("in-flight back to 0", async () => (await listed(t!)).find((i) => i.model === "busy" && i.inFlight === 0));
  });

  it("UnloadModel with a 200 ms deadline during a load fails with the lock message; the load completes and is listed ready", async () => {
    t = await startTestCoordinator({ models: [simModel("slow", { knobs: { load_delay_ms: 2_500 } })] });
    const tc = t;
    const load = tc.admin.loadModel({ model: "slow" });
    await until("slow is loading", async () => (await listed(tc)).find((i) => i.model === "slow" && i.state === InstanceState.LOADING));
    const err = await tc.admin.unloadModel({ model: "slow", stopTimeoutMs: 200n }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect((err as WardenError).rawMessage).toBe('waiting to shut down model "slow": context deadline exceeded');
    const loaded = await load;
    expect(loaded.instance?.state).toBe(InstanceState.READY);
    expect((await listed(tc)).map((i) => [i.model, i.state])).toEqual([["slow", InstanceState.READY]]);
  });

  it("scenario 69: a backend that exits 42 before ready fails the load with the exit code and its last stderr line", async () => {
    t = await startTestCoordinator({ models: [simModel("dies", { knobs: { exit_code: 42 } })] });
    const err = await t.admin.loadModel({ model: "dies" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.FailedPrecondition)).toBe(true);
    expect((err as WardenError).rawMessage).toMatch(/code 42/);
    const failed = await t.waitForEvent("backend.load-failed");
    expect(failed.payload.case === "backendLoadFailed" && failed.payload.value.exitCode).toBe(42);
    expect(failed.payload.case === "backendLoadFailed" && failed.payload.value.lastStderrLine).not.toBe("");
    expect(await listed(t)).toEqual([]);
  });

  it("a cancelled PredictStream leaves the in-flight count at 0", async () => {
    t = await startTestCoordinator({ models: [simModel("s", { knobs: { predict_tokens: 1000, predict_delay_ms: 20 } })] });
    const ctl = new AbortController();
    let got = 0;
    const err = await (async () => {
      for await (const r of t.inference.predictStream({ model: "s", options: { Prompt: "p" } }, { signal: ctl.signal })) {
        if (r.reply !== undefined) got++;
        if (got === 3) ctl.abort();
      }
    })().catch((e: unknown) => e);
    expect(isWardenError(err, Code.Canceled)).toBe(true);
    await until("in-flight back to 0", async () => (await listed(t!)).find((i) => i.model === "s" && i.inFlight === 0));
  });

  it("the data-plane listener (inferenceListen) routes, tracks and cancels like the main port, and rejects bad input by field", async () => {
    t = await startTestCoordinator({ models: [simModel("dp"), simModel("slow", { knobs: { predict_tokens: 1000, predict_delay_ms: 20 } })], extra: { inferenceListen: "127.0.0.1:0" } });
    const address = t.c.inferenceAddress;
    expect(address).toMatch(/^127\.0\.0\.1:\d+$/);
    const dp = createClient(InferenceService, address ?? "");
    try {
      const r = await dp.predict({ model: "dp", options: { Prompt: "hi" } });
      expect(text(r.reply?.message)).toMatch(/^dp: /);
      expect(r.nodeId).toBe("local");
      const bad = await dp.predict({ model: "", options: { Prompt: "hi" } }).catch((e: unknown) => e);
      expect(isWardenError(bad, Code.InvalidArgument)).toBe(true);
      expect((bad as WardenError).rawMessage).toMatch(/^model/);
      const unknown = await dp.predict({ model: "nope", options: {} }).catch((e: unknown) => e);
      expect(isWardenError(unknown, Code.NotFound)).toBe(true);
      const ctl = new AbortController();
      let got = 0;
      const err = await (async () => {
        for await (const x of dp.predictStream({ model: "slow", options: { Prompt: "p" } }, { signal: ctl.signal })) {
          if (x.reply !== undefined) got++;
          if (got === 3) ctl.abort();
        }
      })().catch((e: unknown) => e);
      expect(isWardenError(err, Code.Canceled)).toBe(true);
      await until("in-flight back to 0", async () => (await listed(t!)).filter((i) => i.inFlight === 0).length === 2);
      expect((await listed(t)).map((i) => i.model).sort()).toEqual(["dp", "slow"]);
    } finally {
      dp.close();
    }
  });

  it("idle and busy timeouts evict with short config values", async () => {
    t = await startTestCoordinator({
      models: [simModel("idle"), simModel("stuck", { knobs: { predict_delay_ms: 600_000 } })],
      policy: { idleCheck: true, idleTimeout: "1s", busyCheck: true, busyTimeout: "1s" },
    });
    await t.admin.loadModel({ model: "idle" });
    const idle = await t.waitForEvent("eviction.stopped", (e) => e.model === "idle");
    expect(idle.payload.case === "evictionStopped" && idle.payload.value.reason).toBe(3); // IDLE
    await t.admin.loadModel({ model: "stuck" });
    const call = t.inference.predict({ model: "stuck", options: { Prompt: "forever" } }).catch((e: unknown) => e);
    const busy = await t.waitForEvent("eviction.started", (e) => e.model === "stuck");
    expect(busy.payload.case === "evictionStarted" && busy.payload.value.reason).toBe(4); // BUSY
    expect(busy.payload.case === "evictionStarted" && busy.payload.value.force).toBe(true);
    expect(await call).toBeInstanceOf(WardenError);
    await until("stuck evicted", async () => !(await listed(t!)).some((i) => i.model === "stuck"));
  });

  it("a local stop that fails (no Free) is registered again and stays routable; once the agent's SIGKILL lands, no phantom remains", async () => {
    t = await startTestCoordinator({
      models: [simModel("stubborn", { knobs: { ignore_sigterm: true, free: "unimplemented" } })],
      stop: { rpcTimeout: "300ms" },
      agent: { grace: "6s" },
    });
    const loaded = await t.admin.loadModel({ model: "stubborn" });
    const u = await t.admin.unloadModel({ model: "stubborn" });
    expect(u.outcome).toBe(UnloadOutcome.REGISTERED_AGAIN);
    expect(u.instance?.state).toBe(InstanceState.READY);
    const failed = await t.waitForEvent("eviction.failed");
    expect(failed.payload.case === "evictionFailed" && failed.payload.value.outcome).toBe(1); // REGISTERED_AGAIN
    // still routable (the process ignores SIGTERM and serves until the agent's SIGKILL)
    const r = await t.inference.predict({ model: "stubborn", options: { Prompt: "still there?" } });
    expect(text(r.reply?.message)).toContain("stubborn");
    // The agent completes SIGTERM → grace → SIGKILL regardless; the exit is removed through the watchdog.
    await t.waitForEvent("backend.exited", (e) => e.incarnation === loaded.instance?.incarnation);
    await until("no phantom", async () => !(await listed(t!)).some((i) => i.incarnation === loaded.instance?.incarnation));
  });

  it("a local stop that fails after Free succeeded registers the instance as freed (accounted, not routable) and retries the stop until it is gone", async () => {
    t = await startTestCoordinator({
      models: [simModel("stubborn", { knobs: { ignore_sigterm: true } })],
      stop: { rpcTimeout: "300ms" },
      agent: { grace: "3s" },
    });
    const loaded = await t.admin.loadModel({ model: "stubborn" });
    const u = await t.admin.unloadModel({ model: "stubborn" });
    expect(u.outcome).toBe(UnloadOutcome.REGISTERED_AGAIN);
    expect(u.instance?.state).toBe(InstanceState.FREED);
    await until("freed instance gone after its stop is retried", async () => !(await listed(t!)).some((i) => i.incarnation === loaded.instance?.incarnation));
    expect(t.c.agent?.processes().some((p) => p.incarnation === loaded.instance?.incarnation)).toBe(false);
  });

  it("config errors name the field", () => {
    const bad = (yaml: string): string => {
      try {
        parseCoordinatorConfig(yaml);
      } catch (e) {
        return (e as WardenError).rawMessage;
      }
      return "accepted";
    };
    expect(bad("models:\n  - id: a\n    backend: sim\n    memoryEstimate: 8 gigs\n")).toMatch(/^models\[0\]\.memoryEstimate: /);
    expect(bad("policy:\n  memoryThreshold: 1.5\n")).toMatch(/^policy\.memoryThreshold: /);
    expect(bad("policy:\n  idleTimeout: -5m\n")).toMatch(/^policy\.idleTimeout: /);
    expect(bad("models:\n  - id: a\n    backend: sim\n  - id: a\n    backend: sim\n")).toMatch(/^models\[1\]\.id: duplicate/);
    expect(bad("listen: 1\nbogus: true\n")).toMatch(/^bogus: unknown field/);
    expect(bad("models: [\n")).toMatch(/YAML syntax error/);
    expect(parseDurationMs("15m", "x")).toBe(900_000);
  });

  it("bad input is rejected with INVALID_ARGUMENT naming the field, and nothing changes", async () => {
    t = await startTestCoordinator({ models: [simModel("m1")] });
    await t.admin.loadModel({ model: "m1" });
    const before = await listed(t);
    const policyBefore = await t.admin.getPolicy({});
    const e1 = await t.admin.loadModel({ model: "bad id!" }).catch((e: unknown) => e);
    expect(isWardenError(e1, Code.InvalidArgument) && (e1).rawMessage.startsWith("model:")).toBe(true);
    const e2 = await t.admin.updatePolicy({ patch: { memoryThreshold: 2, limitPerNode: 1 } }).catch((e: unknown) => e);
    expect(isWardenError(e2, Code.InvalidArgument) && (e2).rawMessage).toMatch(/memory_threshold/);
    const e3 = await t.inference.predict({ model: "", options: {} }).catch((e: unknown) => e);
    expect(isWardenError(e3, Code.InvalidArgument) && (e3).rawMessage).toMatch(/^model:/);
    const e4 = await t.admin.forgetInstance({ nodeId: "local", incarnation: "x", operator: "" }).catch((e: unknown) => e);
    expect(isWardenError(e4, Code.InvalidArgument)).toBe(true);
    const e5 = await t.inference.predict({ model: "nope", options: {} }).catch((e: unknown) => e);
    expect(isWardenError(e5, Code.NotFound)).toBe(true);
    expect(await listed(t)).toEqual(before);
    expect(await t.admin.getPolicy({})).toEqual(policyBefore);
  });
});
