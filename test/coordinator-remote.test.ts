/**
 * The coordinator with a separate agent process: a real coordinator (no
 * embedded agent, or embedded plus a remote one), a real agent process
 * registered through NodeService, real backend-sim processes, loopback gRPC.
 * Scenario numbers are localai-semantics.md §6 mapped to Warden's API
 * (ShutdownModel → UnloadModel; the loader's remote unloader → the agent's
 * StopBackend). A remote stop is made to fail by freezing the agent
 * (SIGSTOP): StopBackend then times out after `stop.rpcTimeout`; a node is
 * kept "ready" meanwhile (long nodeGrace) wherever the test must show that
 * the leftover, not an unreachable node, is what blocks a load.
 *
 * Here: remote placement and routing; a failed remote stop (leftover only,
 * blocking group and limit conflicts until reaped); 81 (remote-only); the
 * agent killed during a stop and during a load; an agent restart under a
 * ready model; a restarted coordinator with an open stop intent; 51; 54 on a
 * remote placement; 64 (restarted coordinator, and through the inventories),
 * 65/68; 66 (unreachable node); 48. The embedded-agent scenarios (53/54, 59,
 * 62, 82) are in coordinator-scenarios.test.ts.
 */
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { Code, isWardenError, type WardenError } from "@warden/common";
import { AgentService, BackendState, EvictionReason, InstanceState, NodeState, Placement, UnloadOutcome, type Event, type ModelInstance } from "@warden/proto";
import { liveTaggedSims, newIncarnation, pidAlive, simCatalog, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, lowPortRange, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, startTestCoordinator, until, type TestCoordinator, type TestCoordinatorOptions } from "./support/coordinator-harness.js";

const fileTag = uniqueTag("coord-remote");
const text = (b: Uint8Array | undefined): string => new TextDecoder().decode(b);

let t: TestCoordinator | undefined;
/** Coordinators replaced by a restart (closed without stopping backends, their state dir reused). */
const retired: TestCoordinator[] = [];
const agents: RemoteAgent[] = [];
const cancels: AbortController[] = [];

afterEach(async () => {
  for (const c of cancels.splice(0)) c.abort();
  // Agents first (resumed and killed, with every backend they started), then the coordinator.
  for (const a of agents.splice(0)) await a.cleanup();
  await t?.close();
  t = undefined;
  for (const r of retired.splice(0)) {
    r.admin.close();
    r.inference.close();
    await rm(r.dir, { recursive: true, force: true });
  }
});

afterAll(async () => {
  // No backend-sim (remote or embedded) and no agent process started by this file is left running.
  expect(await liveTaggedSims(fileTag)).toEqual([]);
  expect(await liveRemoteAgents()).toEqual([]);
});

function coordinatorOptions(models: Record<string, unknown>[], o: { policy?: Record<string, unknown>; stop?: Record<string, unknown>; extra?: Record<string, unknown>; embedded?: boolean } = {}): TestCoordinatorOptions {
  return {
    embeddedAgent: o.embedded ?? false,
    models,
    // Loads that wait for a leftover (or a frozen agent) must not run out of attempts.
    policy: { enforcementRetries: 600, ...o.policy },
    ...(o.stop === undefined ? {} : { stop: o.stop }),
    agent: { labels: { node: "local" }, ports: { ...lowPortRange(16), quarantine: "1s" }, catalog: { "backend-sim": simCatalog(`${fileTag}-embedded`) } },
    // ... nor out of loadWait while that agent is frozen (its node unreachable).
    extra: { loadWait: "150s", ...o.extra },
  };
}

async function addAgent(tc: TestCoordinator, nodeId = "remote-a", config?: Record<string, unknown>): Promise<RemoteAgent> {
  const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId, labels: { zone: nodeId }, tag: fileTag, ...(config === undefined ? {} : { config }) });
  agents.push(a);
  await until(`${nodeId} registered with an inventory`, () => {
    const n = tc.c.nodes.get(nodeId);
    return n !== undefined && n.state === "ready" && n.inventory !== undefined;
  });
  return a;
}

async function rows(tc: TestCoordinator): Promise<ModelInstance[]> {
  return (await tc.admin.listModels({})).instances;
}

const byInc = (inc: string) => (e: Event): boolean => e.incarnation === inc;

/** Closes `old` without stopping backends and starts a new coordinator on the same state dir and address. */
async function restartCoordinator(old: TestCoordinator, o: TestCoordinatorOptions): Promise<TestCoordinator> {
  await old.c.close({ stopBackends: false });
  retired.push(old);
  return startTestCoordinator({ ...o, extra: { ...o.extra, listen: old.c.address, stateDir: old.dir } });
}

/** Records every ListModels row of `inc` that is not a leftover, until stopped. */
function watchRows(tc: TestCoordinator, inc: string): { stop(): Promise<InstanceState[]> } {
  const seen: InstanceState[] = [];
  const state = { on: true };
  const loop = (async () => {
    while (state.on) {
      for (const r of await rows(tc).catch(() => [])) if (r.incarnation === inc && r.state !== InstanceState.LEFTOVER) seen.push(r.state);
      await new Promise((r) => setTimeout(r, 50));
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

describe("coordinator with a separate agent process", { timeout: 240_000 }, () => {
  it("a model placed on a remote agent by label is local+remote and Predict works through the coordinator; a local one is local", async () => {
    t = await startTestCoordinator(
      coordinatorOptions([simModel("far", { selector: { node: "remote-a" } }), simModel("near", { selector: { node: "local" } })], { embedded: true }),
    );
    const tc = t;
    const a = await addAgent(tc);
    const far = await tc.admin.loadModel({ model: "far" }, { timeoutMs: 60_000 });
    expect(far.instance?.nodeId).toBe("remote-a");
    expect(far.instance?.state).toBe(InstanceState.READY);
    const near = await tc.admin.loadModel({ model: "near" }, { timeoutMs: 60_000 });
    expect(near.instance?.nodeId).toBe("local");
    const listed = await rows(tc);
    expect(listed.map((r) => [r.model, r.nodeId, r.placement, r.state]).sort()).toEqual([
      ["far", "remote-a", Placement.LOCAL_REMOTE, InstanceState.READY],
      ["near", "local", Placement.LOCAL, InstanceState.READY],
    ]);
    // the remote backend is a process of the remote agent
    const agent = createClient(AgentService, a.address);
    try {
      const inv = await agent.listBackends({});
      const entry = inv.backends.find((b) => b.incarnation === far.instance?.incarnation);
      expect(entry?.model).toBe("far");
      expect(await a.liveBackends()).toEqual([entry?.pid]);
    } finally {
      agent.close();
    }
    const r = await tc.inference.predict({ model: "far", options: { Prompt: "hello" } });
    expect(text(r.reply?.message)).toContain("far");
    expect((await rows(tc)).find((x) => x.model === "far")?.inFlight).toBe(0);
    const u = await tc.admin.unloadModel({ model: "far" });
    expect(u.outcome).toBe(UnloadOutcome.STOPPED);
    await until("remote backend gone", async () => (await a.liveBackends()).length === 0);
  });

  it.each([
    { conflict: "a shared group", groups: ["g"], policy: {} },
    { conflict: "limitPerNode 1", groups: [], policy: { limitPerNode: 1 } },
  ])("a remote stop that fails leaves no watchdog entry, only a leftover that blocks a conflicting load ($conflict) until it is reaped", async ({ groups, policy }) => {
    // nodeGrace long: the frozen node stays ready, so only the leftover can block the load.
    t = await startTestCoordinator(coordinatorOptions([simModel("m1", { groups }), simModel("m2", { groups })], { policy, stop: { rpcTimeout: "1s" }, extra: { nodeGrace: "120s" } }));
    const tc = t;
    const a = await addAgent(tc);
    const loaded = await tc.admin.loadModel({ model: "m1" });
    const inc = loaded.instance?.incarnation ?? "";
    expect(loaded.instance?.placement).toBe(Placement.LOCAL_REMOTE);
    const [pid] = await a.liveBackends();
    expect(pid).toBeGreaterThan(0);

    a.pause();
    const u = await tc.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    expect(u.error).not.toBe("");
    const failed = await tc.waitForEvent("eviction.failed", byInc(inc));
    expect(failed.payload.case === "evictionFailed" && failed.payload.value.reason).toBe(EvictionReason.ADMIN);
    // no watchdog entry, no local half: only the leftover
    expect(tc.c.loader.core.instance(inc)).toBeUndefined();
    expect(tc.c.loader.heldInstance(inc)).toBeUndefined();
    expect((await rows(tc)).map((r) => [r.incarnation, r.state, r.nodeId])).toEqual([[inc, InstanceState.LEFTOVER, "remote-a"]]);

    // a conflicting load (same group, same node) is not admitted while the leftover exists
    let done = false;
    const load = tc.admin.loadModel({ model: "m2" }, { timeoutMs: 180_000 }).finally(() => {
      done = true;
    });
    await tc.waitForEvent("eviction.retried", byInc(inc));
    expect(done).toBe(false);
    expect(tc.c.loader.heldInstances().filter((h) => h.model === "m2")).toEqual([]);
    const left = (await rows(tc)).filter((r) => r.model === "m1");
    expect(left).toHaveLength(1);
    expect(left[0]?.state).toBe(InstanceState.LEFTOVER);
    expect(left[0]?.leftover?.attempts).toBeGreaterThanOrEqual(1);
    expect(left[0]?.leftover?.lastError).not.toBe("");
    expect((await rows(tc)).some((r) => r.model === "m2")).toBe(false);
    expect(await pidAlive(pid ?? 0)).toBe(true);

    a.resume();
    await tc.waitForEvent("leftover.reaped", byInc(inc), 90_000);
    await until("m1's process gone", async () => !(await pidAlive(pid ?? 0)));
    const m2 = await load;
    expect(m2.instance?.state).toBe(InstanceState.READY);
    expect(m2.instance?.nodeId).toBe("remote-a");
    expect((await rows(tc)).map((r) => [r.model, r.state])).toEqual([["m2", InstanceState.READY]]);
    // the reap precedes m2's load
    await tc.waitForEvent("backend.loaded", (e) => e.model === "m2");
    const reapedAt = tc.events.findIndex((e) => e.payload.case === "leftoverReaped" && e.incarnation === inc);
    expect(reapedAt).toBeGreaterThanOrEqual(0);
    expect(reapedAt).toBeLessThan(tc.events.findIndex((e) => e.payload.case === "backendLoaded" && e.model === "m2"));
  });

  it("scenario 81 adapted: a remote-only model whose stop fails is never registered again, and stays a leftover blocking a conflicting load until reaped", async () => {
    const opts = coordinatorOptions([simModel("m1", { groups: ["g"] }), simModel("m2", { groups: ["g"] })], { stop: { rpcTimeout: "1s" }, extra: { nodeGrace: "120s" } });
    const first = await startTestCoordinator(opts);
    t = first;
    const a = await addAgent(first);
    const loaded = await first.admin.loadModel({ model: "m1" });
    const inc = loaded.instance?.incarnation ?? "";
    const [pid] = await a.liveBackends();

    // a coordinator restarted over the running agent knows m1 only from the inventory: remote-only
    t = await restartCoordinator(first, opts);
    const tc = t;
    const adopted = await until("m1 adopted as remote-only", async () => (await rows(tc)).find((r) => r.incarnation === inc && r.state === InstanceState.READY), 60_000);
    expect(adopted.placement).toBe(Placement.REMOTE_ONLY);
    expect(adopted.nodeId).toBe("remote-a");

    a.pause();
    const u = await tc.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    const watch = watchRows(tc, inc);
    expect(tc.c.loader.core.instance(inc)).toBeUndefined();
    expect(tc.c.loader.heldInstance(inc)).toBeUndefined();

    let done = false;
    const load = tc.admin.loadModel({ model: "m2" }, { timeoutMs: 180_000 }).finally(() => {
      done = true;
    });
    await tc.waitForEvent("eviction.retried", byInc(inc));
    expect(done).toBe(false);
    expect(tc.c.loader.heldInstances().filter((h) => h.model === "m2")).toEqual([]);
    expect((await rows(tc)).map((r) => [r.incarnation, r.state])).toEqual([[inc, InstanceState.LEFTOVER]]);

    a.resume();
    await tc.waitForEvent("leftover.reaped", byInc(inc), 90_000);
    const m2 = await load;
    expect(m2.instance?.state).toBe(InstanceState.READY);
    // after the failed stop, m1's incarnation was never listed as anything but a leftover
    expect(await watch.stop()).toEqual([]);
    await until("m1's process gone", async () => !(await pidAlive(pid ?? 0)));
    expect((await rows(tc)).map((r) => r.model)).toEqual(["m2"]);
  });

  it("the agent killed during a remote stop: leftover; the restarted agent adopts the backend with stopRequested and the coordinator reaps it", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("m1", { knobs: { ignore_sigterm: true } })], { stop: { rpcTimeout: "30s" } }));
    const tc = t;
    // a long grace: the stop stays in flight (SIGTERM ignored) until the agent dies
    const a = await addAgent(tc, "remote-a", { grace: "120s" });
    const loaded = await tc.admin.loadModel({ model: "m1" });
    const inc = loaded.instance?.incarnation ?? "";
    const [pid] = await a.liveBackends();
    expect(pid).toBeGreaterThan(0);

    const unload = tc.admin.unloadModel({ model: "m1" });
    const agent = createClient(AgentService, a.address);
    try {
      await until("the agent received the stop", async () => (await agent.listBackends({})).backends.find((b) => b.incarnation === inc && b.stopRequested !== undefined));
    } finally {
      agent.close();
    }
    // ListBackends shows the request before the record write completes: kill only once it is on disk.
    await until("the stop request is in the agent's record", async () => {
      const rec = await readFile(join(a.stateDir, `${inc}.json`), "utf8").catch(() => "{}");
      return (JSON.parse(rec) as { stopRequested?: unknown }).stopRequested != null;
    });
    await a.kill();
    const u = await unload;
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    const watch = watchRows(tc, inc);
    expect(tc.c.loader.core.instance(inc)).toBeUndefined();
    expect((await rows(tc)).map((r) => [r.incarnation, r.state])).toEqual([[inc, InstanceState.LEFTOVER]]);
    // the backend outlives its agent
    expect(await pidAlive(pid ?? 0)).toBe(true);

    await a.restart();
    const adoption = a.proc.lines
      .map((l) => {
        try {
          return JSON.parse(l) as { msg?: string; incarnation?: string; stopRequested?: boolean };
        } catch {
          return {};
        }
      })
      .find((o) => o.msg === "adopted backend" && o.incarnation === inc);
    expect(adoption?.stopRequested).toBe(true);

    await tc.waitForEvent("leftover.reaped", byInc(inc), 90_000);
    await until("the backend is gone", async () => !(await pidAlive(pid ?? 0)));
    // nothing forgotten, nothing routable: never listed again as an instance
    expect(await watch.stop()).toEqual([]);
    expect(tc.events.some((e) => e.payload.case === "instanceForgotten")).toBe(false);
    expect(await rows(tc)).toEqual([]);
    const after = createClient(AgentService, a.address);
    try {
      expect((await after.listBackends({})).backends.filter((b) => b.incarnation === inc && b.state !== BackendState.EXITED)).toEqual([]);
    } finally {
      after.close();
    }
  });

  it("a coordinator restarted with an open stop intent adopts the still-running instance as a leftover, never as routable, and reaps it", async () => {
    const opts = coordinatorOptions([simModel("m1")], { stop: { rpcTimeout: "2s" } });
    const first = await startTestCoordinator(opts);
    t = first;
    const a = await addAgent(first);
    const loaded = await first.admin.loadModel({ model: "m1" });
    const inc = loaded.instance?.incarnation ?? "";
    const [pid] = await a.liveBackends();
    // The agent dies before the stop reaches it: no stopRequested record, only the coordinator's intent.
    await a.kill();
    const u = await first.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    expect(first.c.outbox.openStopIntents().map((i) => i.incarnation)).toContain(inc);
    expect(await pidAlive(pid ?? 0)).toBe(true);

    t = await restartCoordinator(first, opts);
    const tc = t;
    const watch = watchRows(tc, inc);
    await a.restart();
    const adoption = a.proc.lines.map((l) => {
      try {
        return JSON.parse(l) as { msg?: string; incarnation?: string; stopRequested?: boolean };
      } catch {
        return {};
      }
    }).find((o) => o.msg === "adopted backend" && o.incarnation === inc);
    expect(adoption?.stopRequested).toBe(false);
    await tc.waitForEvent("leftover.reaped", byInc(inc), 90_000);
    await until("the backend is gone", async () => !(await pidAlive(pid ?? 0)));
    expect(await watch.stop()).toEqual([]);
    expect(await rows(tc)).toEqual([]);
    expect(tc.c.outbox.openStopIntents().map((i) => i.incarnation)).not.toContain(inc);
  });

  it("an agent restarted under a ready remote model keeps it routable: same incarnation, no second load", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("m1")]));
    const tc = t;
    const a = await addAgent(tc);
    const loaded = await tc.admin.loadModel({ model: "m1" });
    const inc = loaded.instance?.incarnation ?? "";
    const bootBefore = tc.c.nodes.get("remote-a")?.bootEpoch;
    // SIGTERM: the agent exits and leaves its backends running (DESIGN §2)
    await a.stop();
    expect(await a.liveBackends()).toHaveLength(1);
    await a.restart();
    await until("the restarted agent registered with its inventory", () => {
      const n = tc.c.nodes.get("remote-a");
      return n !== undefined && n.bootEpoch !== bootBefore && n.inventory?.some((e) => e.incarnation === inc) === true;
    });
    const r = await tc.inference.predict({ model: "m1", options: { Prompt: "after restart" } });
    expect(text(r.reply?.message)).toContain("m1");
    expect((await rows(tc)).map((x) => [x.incarnation, x.state, x.nodeId])).toEqual([[inc, InstanceState.READY, "remote-a"]]);
    expect(tc.events.filter((e) => e.payload.case === "backendLoaded")).toHaveLength(1);
    expect(await a.liveBackends()).toHaveLength(1);
    // and the new agent stops it when asked
    expect((await tc.admin.unloadModel({ model: "m1" })).outcome).toBe(UnloadOutcome.STOPPED);
    await until("no backend left", async () => (await a.liveBackends()).length === 0);
  });

  it("the agent killed during a remote load: the load fails, nothing is listed as routable, the spawned backend is tracked until gone, the next load succeeds", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("slow", { knobs: { load_delay_ms: 600_000 } }), simModel("ok")], { stop: { rpcTimeout: "1s" }, policy: { loadFailureCooldown: "1s" } }));
    const tc = t;
    const a = await addAgent(tc);
    const load = tc.admin.loadModel({ model: "slow" }, { timeoutMs: 60_000 }).catch((e: unknown) => e);
    // spawned (the address is attached on the agent's "spawned", after its record is on disk) and exec'd
    const loading = await until("slow is loading on remote-a", async () => (await rows(tc)).find((r) => r.model === "slow" && r.state === InstanceState.LOADING && r.address !== ""));
    const [pid] = await until("slow's backend process", async () => {
      const live = await a.liveBackends();
      return live.length === 1 ? live : undefined;
    });
    expect(pid).toBeGreaterThan(0);
    await a.kill();
    const err = await load;
    expect(err).toBeInstanceOf(Error);
    const failed = await tc.waitForEvent("backend.load-failed", byInc(loading.incarnation));
    expect(failed.model).toBe("slow");
    expect(tc.c.loader.core.instance(loading.incarnation)).toBeUndefined();
    const watch = watchRows(tc, loading.incarnation);
    await a.restart();
    // the restarted agent stops the unfinished start itself; the coordinator learns it is gone
    await until("slow's backend gone", async () => !(await pidAlive(pid ?? 0)));
    // (loader.knows() stays true for an incarnation our stop confirmed gone, so a
    // stale heartbeat cannot re-adopt it: "tracked" means held, accounted or a leftover)
    const tracked = (inc: string): boolean => tc.c.loader.heldInstance(inc) !== undefined || tc.c.loader.core.instance(inc) !== undefined || tc.c.loader.leftoverList().some((l) => l.incarnation === inc);
    await until("nothing of slow is tracked", async () => !tracked(loading.incarnation) && !(await rows(tc)).some((r) => r.model === "slow"));
    expect(await watch.stop()).toEqual([]);
    const ok = await until("another model loads on the restarted agent", async () => tc.admin.loadModel({ model: "ok" }).catch(() => undefined));
    expect(ok.instance?.nodeId).toBe("remote-a");
    expect((await rows(tc)).map((r) => [r.model, r.state])).toEqual([["ok", InstanceState.READY]]);
  });

  it("scenario 51 adapted: after a failed remote stop the next LoadModel starts exactly one replacement while the old one is a leftover", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("m1")], { stop: { rpcTimeout: "1s" }, extra: { nodeGrace: "120s" } }));
    const tc = t;
    const a = await addAgent(tc);
    const first = await tc.admin.loadModel({ model: "m1" });
    const inc1 = first.instance?.incarnation ?? "";
    a.pause();
    const u = await tc.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    expect((await rows(tc)).map((r) => [r.incarnation, r.state])).toEqual([[inc1, InstanceState.LEFTOVER]]);

    const load = tc.admin.loadModel({ model: "m1" }, { timeoutMs: 180_000 });
    const load2 = tc.admin.loadModel({ model: "m1" }, { timeoutMs: 180_000 });
    await tc.waitForEvent("eviction.retried", byInc(inc1));
    expect(tc.c.loader.leftoverList().map((l) => l.incarnation)).toEqual([inc1]);
    a.resume();
    const [r1, r2] = await Promise.all([load, load2]);
    const inc2 = r1.instance?.incarnation ?? "";
    expect(inc2).not.toBe(inc1);
    expect(r2.instance?.incarnation).toBe(inc2);
    expect(r1.instance?.state).toBe(InstanceState.READY);
    await tc.waitForEvent("backend.loaded", byInc(inc2));
    const loadedEvents = tc.events.filter((e) => e.payload.case === "backendLoaded" && e.model === "m1");
    expect(loadedEvents.map((e) => e.incarnation)).toEqual([inc1, inc2]);
    expect(tc.events.filter((e) => e.payload.case === "backendLoadFailed")).toEqual([]);
    await tc.waitForEvent("leftover.reaped", byInc(inc1), 90_000);
    expect((await rows(tc)).map((r) => [r.incarnation, r.state])).toEqual([[inc2, InstanceState.READY]]);
    expect(await a.liveBackends()).toHaveLength(1);
  });

  it("scenario 54 on a remote placement: LoadModel(X) during X's StopBackend waits for the settle; no second copy of X meanwhile", async () => {
    // SIGTERM ignored, 4 s grace: StopBackend stays in flight (after the local half was dropped) until the SIGKILL.
    t = await startTestCoordinator(coordinatorOptions([simModel("x", { knobs: { ignore_sigterm: true } })], { stop: { rpcTimeout: "30s" } }));
    const tc = t;
    const a = await addAgent(tc, "remote-a", { grace: "4s" });
    const x1 = (await tc.admin.loadModel({ model: "x" })).instance?.incarnation ?? "";
    const unload = tc.admin.unloadModel({ model: "x" });
    const agent = createClient(AgentService, a.address);
    try {
      await until("StopBackend reached the agent", async () => (await agent.listBackends({})).backends.find((b) => b.incarnation === x1 && b.stopRequested !== undefined));
    } finally {
      agent.close();
    }
    const early: string[] = [];
    const state = { on: true };
    const monitor = (async () => {
      while (state.on) {
        // x1 leaves the watchdog only when its stop settles
        if (tc.c.loader.core.instance(x1) !== undefined && tc.c.loader.heldInstances().some((h) => h.model === "x" && h.incarnation !== x1)) early.push("a second X was started while X's stop was pending");
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const reload = tc.admin.loadModel({ model: "x" }, { timeoutMs: 90_000 });
    const u = await unload;
    expect(u.outcome).toBe(UnloadOutcome.STOPPED);
    const x2 = await reload;
    state.on = false;
    await monitor;
    expect(early).toEqual([]);
    expect(x2.instance?.incarnation).not.toBe(x1);
    expect(x2.instance?.state).toBe(InstanceState.READY);
    expect((await rows(tc)).map((r) => [r.incarnation, r.state])).toEqual([[x2.instance?.incarnation, InstanceState.READY]]);
  });

  it("scenarios 64, 65 and 68: a coordinator restarted over a running agent stops a model it knows only from the inventory; absent everywhere is NOT_LOADED", async () => {
    const opts = coordinatorOptions([simModel("m1"), simModel("m2")]);
    const first = await startTestCoordinator(opts);
    t = first;
    const a = await addAgent(first);
    const loaded = await first.admin.loadModel({ model: "m1" });
    const inc = loaded.instance?.incarnation ?? "";
    const [pid] = await a.liveBackends();

    t = await restartCoordinator(first, opts);
    const tc = t;
    await until("the agent registered again with its inventory", () => tc.c.nodes.get("remote-a")?.inventory?.some((e) => e.incarnation === inc), 60_000);
    const u = await tc.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.STOPPED);
    expect(u.instance?.incarnation ?? inc).toBe(inc);
    await until("m1's process gone", async () => !(await pidAlive(pid ?? 0)));
    expect(await rows(tc)).toEqual([]);
    // 65 / 68: absent everywhere (m1 now, m2 never loaded)
    expect((await tc.admin.unloadModel({ model: "m2" })).outcome).toBe(UnloadOutcome.NOT_LOADED);
    await until("inventory without m1", () => tc.c.nodes.findModel("m1").t === "absent");
    expect((await tc.admin.unloadModel({ model: "m1" })).outcome).toBe(UnloadOutcome.NOT_LOADED);
    // neither configured nor anywhere: NOT_FOUND naming the model
    const nf = await tc.admin.unloadModel({ model: "nope" }).catch((e: unknown) => e);
    expect(isWardenError(nf, Code.NotFound)).toBe(true);
  });

  it("scenario 64 through the inventories: a model the loader does not hold but an agent's inventory has (a start it never heard of) is stopped by UnloadModel", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("m1")], { stop: { rpcTimeout: "30s" } }));
    const tc = t;
    const a = await addAgent(tc);
    // A start this coordinator did not make (e.g. begun by a predecessor that crashed mid-load): still
    // loading, so the reconciler leaves it alone and only the inventory knows it.
    const inc = newIncarnation();
    const agent = createClient(AgentService, a.address);
    const ctl = new AbortController();
    cancels.push(ctl);
    void (async () => {
      for await (const _ of agent.startBackend({ incarnation: inc, model: "m1", backend: "backend-sim", options: ["sim.load_delay_ms:6000"] }, { signal: ctl.signal })) {
        // drain
      }
    })().catch(() => undefined);
    await until("m1 in the coordinator's view of the inventory", () => tc.c.nodes.get("remote-a")?.inventory?.some((e) => e.incarnation === inc && e.state !== BackendState.EXITED));
    const [pid] = await until("m1's process", async () => {
      const live = await a.liveBackends();
      return live.length === 1 ? live : undefined;
    });
    expect(tc.c.loader.heldInstance(inc)).toBeUndefined();
    expect(tc.c.loader.core.instance(inc)).toBeUndefined();
    // Still loading there, so never adopted as routable (seeds 34087, 35615): it becomes a leftover
    // whose stop is retried until the agent confirms it gone.
    const u = await tc.admin.unloadModel({ model: "m1" });
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    await until("m1's process gone", async () => !(await pidAlive(pid ?? 0)));
    await tc.waitForEvent("leftover.reaped", byInc(inc));
    await until("inventory without m1", () => tc.c.nodes.findModel("m1").t === "absent");
    expect((await tc.admin.unloadModel({ model: "m1" })).outcome).toBe(UnloadOutcome.NOT_LOADED);
    expect(await rows(tc)).toEqual([]);
    agent.close();
  });

  it("scenario 66: an unreachable node whose last inventory had the model makes UnloadModel an error (UNAVAILABLE), never NOT_LOADED", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("m1"), simModel("m2")], { extra: { nodeGrace: "1s" } }));
    const tc = t;
    const a = await addAgent(tc);
    // A start the coordinator does not hold (e.g. begun by a coordinator that crashed mid-load):
    // the agent's inventory has m1, still loading.
    const inc = newIncarnation();
    const agent = createClient(AgentService, a.address);
    const ctl = new AbortController();
    cancels.push(ctl);
    void (async () => {
      for await (const _ of agent.startBackend({ incarnation: inc, model: "m1", backend: "backend-sim", options: ["sim.load_delay_ms:600000"] }, { signal: ctl.signal })) {
        // drain
      }
    })().catch(() => undefined);
    await until("m1 in the coordinator's view of the inventory", () => tc.c.nodes.get("remote-a")?.inventory?.some((e) => e.incarnation === inc && e.state !== BackendState.EXITED));
    expect(tc.c.loader.heldInstance(inc)).toBeUndefined();

    a.pause();
    await until("remote-a unreachable", async () => (await tc.admin.listNodes({})).nodes.find((n) => n.nodeId === "remote-a")?.state === NodeState.UNREACHABLE);
    const err = await tc.admin.unloadModel({ model: "m1" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    expect((err as WardenError).rawMessage).toContain("unreachable");
    // a model its last inventory did not have is known to be absent
    expect((await tc.admin.unloadModel({ model: "m2" })).outcome).toBe(UnloadOutcome.NOT_LOADED);
    a.resume();
    agent.close();
  });

  it("scenario 48: a remote backend killed behind the coordinator's back → Predict sees UNAVAILABLE, the instance is removed through the watchdog and the call succeeds once on a fresh instance", async () => {
    t = await startTestCoordinator(coordinatorOptions([simModel("m1")], { stop: { rpcTimeout: "1s" }, extra: { nodeGrace: "120s" } }));
    const tc = t;
    const a = await addAgent(tc);
    const loaded = await tc.admin.loadModel({ model: "m1" });
    const inc1 = loaded.instance?.incarnation ?? "";
    const agent = createClient(AgentService, a.address);
    const entry = (await agent.listBackends({})).backends.find((b) => b.incarnation === inc1);
    agent.close();
    expect(entry?.address).toBe(loaded.instance?.address);
    // Freeze the agent so neither its exit watch nor a heartbeat tells the coordinator first.
    a.pause();
    process.kill(entry?.pid ?? 0, "SIGKILL");
    await until("backend dead", async () => !(await pidAlive(entry?.pid ?? 0)));
    const call = tc.inference.predict({ model: "m1", options: { Prompt: "still there?" } }, { timeoutMs: 180_000 });
    const started = await tc.waitForEvent("eviction.started", byInc(inc1));
    expect(started.payload.case === "evictionStarted" && started.payload.value.reason).toBe(EvictionReason.HEALTH);
    expect(started.payload.case === "evictionStarted" && started.payload.value.force).toBe(true);
    a.resume();
    const r = await call;
    expect(text(r.reply?.message)).toContain("m1");
    const now = await rows(tc);
    const fresh = now.filter((x) => x.model === "m1" && x.state === InstanceState.READY);
    expect(fresh).toHaveLength(1);
    expect(fresh[0]?.incarnation).not.toBe(inc1);
    await tc.waitForEvent("backend.loaded", byInc(fresh[0]?.incarnation ?? ""));
    expect(tc.events.filter((e) => e.payload.case === "backendLoaded" && e.model === "m1").map((e) => e.incarnation)).toEqual([inc1, fresh[0]?.incarnation]);
    await until("the dead instance is not listed", async () => !(await rows(tc)).some((x) => x.incarnation === inc1));
    expect((await rows(tc)).find((x) => x.model === "m1")?.inFlight).toBe(0);
  });
});
