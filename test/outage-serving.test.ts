/**
 * Serving through an agent outage, real processes: a coordinator, one agent
 * and its backend-sim. The agent is frozen (SIGSTOP) or killed (-9) past the
 * unreachable threshold while a few callers loop Predict: not one call fails,
 * the same backend process answers throughout (nothing restarted, nothing
 * evicted), and a restarted agent adopts it. A backend killed while its agent
 * is frozen fails the coordinator's own probe: calls are then refused
 * UNAVAILABLE by routing, never sent to the dead address.
 */
import { describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { NodeState, OutageServing, type ModelInstance } from "@warden/proto";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import type { ChaosCluster } from "./support/chaos-cluster.js";
import { simModel, until } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

// Unreachable one second after the last heartbeat (agents beat every 250 ms); never lost within a test.
// A probe's deadline is generous: on a loaded machine a slow answer is not a dead backend.
const config = { nodeGrace: "1s", nodeLostAfter: "1h", outageProbeInterval: "250ms", outageProbeTimeout: "10s", loadWait: "60s" };

async function m1Row(c: ChaosCluster): Promise<ModelInstance | undefined> {
  return (await c.admin.listModels({})).instances.find((i) => i.model === "m1");
}

/** A few callers looping Predict until stopped; every failure kept. */
function callers(c: ChaosCluster, n: number): { readonly ok: () => number; readonly failures: string[]; stop(): Promise<void> } {
  let ok = 0;
  let stopped = false;
  const failures: string[] = [];
  const loops = Array.from({ length: n }, async (_, i) => {
    while (!stopped) {
      try {
        await c.inference.predict({ model: "m1", options: { Prompt: `caller ${String(i)}` } }, { timeoutMs: 60_000 });
        ok++;
      } catch (err) {
        failures.push(WardenError.from(err).message);
        // No hot loop against a refusing or closed coordinator.
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  });
  return {
    ok: () => ok,
    failures,
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** Waits until `more` calls succeeded after now: progress, not time. */
async function callsGoOn(what: string, calls: { readonly ok: () => number }, more = 20): Promise<void> {
  const from = calls.ok();
  await until(what, () => calls.ok() >= from + more, 60_000);
}

async function nodeUnreachableAfter(c: ChaosCluster, from: number): Promise<void> {
  await c.coord.waitForEvent("node.unreachable", (e) => e.nodeId === "a" && c.coord.events.indexOf(e) >= from, 60_000);
}

describe("serving through an agent outage", { timeout: 240_000 }, () => {
  it("agent SIGSTOPped past the unreachable threshold, then SIGCONT: 0 failed calls, the same backend pid, nothing evicted or restarted", async () => {
    const c = await chaos.start({ name: "outage-pause", models: [simModel("m1")], config });
    const a = await c.addAgent("a");
    const inc = (await c.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const pids = await a.liveBackends();
    expect(pids.length).toBe(1);
    const calls = callers(c, 3);
    let beforePause = 0;
    try {
      await callsGoOn("calls before the pause", calls);

      beforePause = c.coord.events.length;
      a.pause();
      await nodeUnreachableAfter(c, beforePause);
      // The listings say so: the instance serves on although its agent is unreachable.
      await until("m1 listed as serving through the outage", async () => (await m1Row(c))?.outageServing === OutageServing.SERVING);
      await until("node a counts it", async () => (await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "a" && n.state === NodeState.UNREACHABLE)?.servingThroughOutage === 1);
      await callsGoOn("calls while the agent is frozen", calls);
      expect((await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "a")?.state).toBe(NodeState.UNREACHABLE);

      a.resume();
      await until("node a ready again", async () => (await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "a")?.state === NodeState.READY, 60_000);
      await callsGoOn("calls after SIGCONT", calls);
    } finally {
      await calls.stop();
    }

    expect(calls.failures).toEqual([]);
    expect(await a.liveBackends()).toEqual(pids);
    const row = await m1Row(c);
    expect([row?.incarnation, row?.outageServing]).toEqual([inc, OutageServing.UNSPECIFIED]);
    expect(c.logged().filter((e) => e.type.startsWith("eviction.") || e.type === "node.lost" || (e.type === "backend.loaded" && c.logged().indexOf(e) >= beforePause))).toEqual([]);
  });

  it("agent killed (-9), calls go on, the agent restarted on the same state dir adopts the backend: 0 failed calls, the same pid", async () => {
    const c = await chaos.start({ name: "outage-kill", models: [simModel("m1")], config });
    const a = await c.addAgent("a");
    const inc = (await c.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const pids = await a.liveBackends();
    expect(pids.length).toBe(1);
    const calls = callers(c, 3);
    try {
      await callsGoOn("calls before the kill", calls);

      const beforeKill = c.coord.events.length;
      await a.kill();
      await nodeUnreachableAfter(c, beforeKill);
      await until("m1 listed as serving through the outage", async () => (await m1Row(c))?.outageServing === OutageServing.SERVING);
      await callsGoOn("calls while the agent is dead", calls);

      await a.restart();
      await until("node a ready again", async () => (await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "a")?.state === NodeState.READY, 60_000);
      await callsGoOn("calls after the restart", calls);
    } finally {
      await calls.stop();
    }

    expect(calls.failures).toEqual([]);
    expect(await a.liveBackends()).toEqual(pids);
    expect((await m1Row(c))?.incarnation).toBe(inc);
    // Nothing evicted, lost or loaded again (backend.loaded once: the load before the kill).
    expect(c.logged().filter((e) => e.type.startsWith("eviction.") || e.type === "node.lost" || e.type === "backend.loaded").map((e) => e.type)).toEqual(["backend.loaded"]);
  });

  it("backend killed (-9) while its agent is frozen: the probe fails, calls are refused UNAVAILABLE by routing, never sent to the dead address; after SIGCONT the agent's word removes it", async () => {
    const c = await chaos.start({ name: "outage-backend-dies", models: [simModel("m1")], config });
    const a = await c.addAgent("a");
    const inc = (await c.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const [pid] = await a.liveBackends();
    const beforePause = c.coord.events.length;
    a.pause();
    await nodeUnreachableAfter(c, beforePause);
    await until("m1 listed as serving through the outage", async () => (await m1Row(c))?.outageServing === OutageServing.SERVING);
    await c.inference.predict({ model: "m1", options: { Prompt: "served while frozen" } }, { timeoutMs: 60_000 });

    process.kill(pid as number, "SIGKILL");
    await until("the probe fails", async () => (await m1Row(c))?.outageServing === OutageServing.PROBE_FAILED, 60_000);
    const err = await c.inference.predict({ model: "m1", options: { Prompt: "after the backend died" } }, { timeoutMs: 60_000 }).then(
      () => undefined,
      (e: unknown) => WardenError.from(e),
    );
    // Refused by routing (the probe's word), not a call that reached the dead address and failed there.
    expect(err?.code).toBe(Code.Unavailable);
    expect(err?.message).toContain("does not answer the coordinator's health probe");
    // Still accounted (never forgotten while its agent cannot say), still not routed.
    expect((await m1Row(c))?.incarnation).toBe(inc);

    a.resume();
    // The agent reports the exit: the instance leaves through the normal path.
    await until("m1 gone once the agent reports", async () => (await m1Row(c)) === undefined, 60_000);
  });
});
