/**
 * Cluster recovery over real processes: mass unreachability pauses
 * unreachability-driven actions; a restarted coordinator with leftovers
 * outstanding — one whose StopBackend reached the agent, one whose
 * StopBackend never did (agent partitioned) — keeps each accounted and never
 * routable, and reaps both.
 */
import { afterEach, describe, expect, it } from "vitest";
import { InstanceState, NodeState, UnloadOutcome } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { startCoordinator, type Coordinator } from "@warden/coordinator";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";

const tag = `recovery-${String(process.pid)}-${String(Date.now())}`;
let t: TestCoordinator | undefined;
let c2: Coordinator | undefined;
let agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await c2?.close({ stopBackends: false });
  c2 = undefined;
  await t?.close();
  t = undefined;
  expect(await liveRemoteAgents()).toEqual([]);
});

describe("cluster recovery (coordinator + agent processes)", () => {
  it("mass unreachability (3 of 3 nodes) pauses lost declarations and says so; it ends when they return", async () => {
    const tc = await startTestCoordinator({ embeddedAgent: false, models: [simModel("m")], extra: { nodeGrace: "1s", nodeLostAfter: "1s" } });
    t = tc;
    for (const id of ["n1", "n2", "n3"]) agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: id, tag }));
    await until("three nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 3);
    // Each has had a heartbeat applied: only such nodes count toward the pause (auth off: no credential vouches for them).
    await until("three inventories", () => ["n1", "n2", "n3"].every((id) => tc.c.nodes.get(id)?.inventory !== undefined));
    for (const a of agents) a.pause();
    const paused = await tc.waitForEvent("unreachability.paused", (e) => e.payload.case === "unreachabilityPaused" && e.payload.value.paused);
    expect(paused.payload.case === "unreachabilityPaused" && paused.payload.value.unreachableNodes).toBe(3);
    // Well past grace + lostAfter: nobody is declared lost while paused.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(tc.events.filter((e) => eventTypeOf(e) === "node.lost")).toEqual([]);
    expect((await tc.admin.listNodes({})).nodes.map((n) => n.state)).toEqual([NodeState.UNREACHABLE, NodeState.UNREACHABLE, NodeState.UNREACHABLE]);
    for (const a of agents) a.resume();
    await tc.waitForEvent("unreachability.paused", (e) => e.payload.case === "unreachabilityPaused" && !e.payload.value.paused);
    await until("nodes ready again", async () => (await tc.admin.listNodes({})).nodes.every((n) => n.state === NodeState.READY));
  });

  it("a restarted coordinator keeps both kinds of outstanding leftover accounted and unroutable, and reaps them", async () => {
    const tc = await startTestCoordinator({
      embeddedAgent: false,
      models: [simModel("reached", { selector: { node: "a" }, knobs: { ignore_sigterm: true, free: "unimplemented" } }), simModel("partitioned", { selector: { node: "b" } })],
      stop: { rpcTimeout: "1s" },
    });
    t = tc;
    const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "a", tag, config: { grace: "60s" } });
    const b = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "b", tag });
    agents.push(a, b);
    await until("two nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
    const reached = (await tc.admin.loadModel({ model: "reached" })).instance!;
    const partitioned = (await tc.admin.loadModel({ model: "partitioned" })).instance!;
    // 1: agent b is partitioned: StopBackend never arrives → leftover, stop intent journaled.
    b.pause();
    expect((await tc.admin.unloadModel({ model: "partitioned" })).outcome).toBe(UnloadOutcome.LEFTOVER);
    // 2: StopBackend reaches agent a (stopRequested recorded), the backend ignores SIGTERM (grace 60 s),
    // the RPC times out → leftover. The coordinator goes down before its first retry (≥ 0.8 s later).
    expect((await tc.admin.unloadModel({ model: "reached" })).outcome).toBe(UnloadOutcome.LEFTOVER);
    // Restart the coordinator on the same state dir and address; backends keep running.
    const config = tc.c.config;
    const address = tc.c.address;
    await tc.c.close({ stopBackends: false });
    c2 = await startCoordinator({ ...config, listen: address });
    const coord = c2;
    const stateOf = (inc: string): string | undefined => {
      if (coord.loader.leftoverList().some((l) => l.incarnation === inc)) return "leftover";
      const v = coord.loader.core.instance(inc);
      return v === undefined ? undefined : v.pendingEviction !== undefined ? "pending" : v.state;
    };
    const seen = { reached: new Set<string | undefined>(), partitioned: new Set<string | undefined>() };
    const watch = setInterval(() => {
      seen.reached.add(stateOf(reached.incarnation));
      seen.partitioned.add(stateOf(partitioned.incarnation));
    }, 20);
    try {
      await until("reached adopted as a leftover", () => stateOf(reached.incarnation) === "leftover" || undefined);
      // b comes back. (SIGSTOP is not a packet-dropping partition: the old coordinator's
      // StopBackend may still be in b's socket and run on resume. Either way the
      // process must end, be accounted until then, and its stop intent be closed.)
      b.resume();
      await until("both reaped", async () => (await a.liveBackends()).length === 0 && (await b.liveBackends()).length === 0 && coord.loader.leftoverList().length === 0, 60_000);
      await until("stop intents closed", () => coord.outbox.openStopIntents().length === 0 || undefined);
    } finally {
      clearInterval(watch);
    }
    // Never routable in between: never ready, loading or freed in the new coordinator.
    for (const s of [...seen.reached, ...seen.partitioned]) expect([undefined, "leftover"]).toContain(s);
    const listed = await tc.admin.listModels({});
    expect(listed.instances.filter((i) => i.state !== InstanceState.LEFTOVER)).toEqual([]);
  });
});
