/**
 * Replicas over real processes: a coordinator (in this test
 * process, no embedded agent) and agent processes that spawn real
 * backend-sim processes, everything over real loopback gRPC. Calls are held
 * open by slow streams cut by the test (replica-calls.ts), so in-flight
 * counts are exact; every wait is on an event or a condition.
 */
import { describe, expect, it } from "vitest";
import { EvictionReason, InstanceState, NodeState, PlacementDecision, type Event } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { runningBackends } from "./support/chaos-checks.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { replicaCluster } from "./support/replica-cluster.js";
import { holdCalls, instancesOf, readyOf, replicaModel, summaryOf, type HeldCalls } from "./support/replica-calls.js";

let held: HeldCalls[] = [];
const cl = replicaCluster("replicas", async () => {
  for (const h of held) await h.release().catch(() => undefined);
  held = [];
  for (const a of cl.agents) a.resume();
});
const { tag } = cl;

function cur(): TestCoordinator {
  if (cl.tc === undefined) throw new Error("no coordinator");
  return cl.tc;
}

/** Starts agents for `nodes` (id → extra agent config) and waits until the coordinator lists them ready. */
async function addNodes(nodes: Record<string, Record<string, unknown>>): Promise<RemoteAgent[]> {
  const t = cur();
  const started = await Promise.all(Object.entries(nodes).map(([nodeId, config]) => startRemoteAgent({ coordinator: t.c.address, nodeId, tag, config })));
  cl.agents.push(...started);
  const ids = Object.keys(nodes);
  await until(`${ids.join(", ")} ready`, async () => (await t.admin.listNodes({})).nodes.filter((n) => ids.includes(n.nodeId) && n.state === NodeState.READY).length === ids.length, 60_000);
  return started;
}

async function cluster(models: Record<string, unknown>[], nodes: Record<string, Record<string, unknown>>, o: { stop?: Record<string, unknown>; policy?: Record<string, unknown>; extra?: Record<string, unknown> } = {}): Promise<TestCoordinator> {
  cl.tc = await startTestCoordinator({ embeddedAgent: false, models, policy: o.policy ?? {}, ...(o.stop === undefined ? {} : { stop: o.stop }), extra: o.extra ?? {} });
  await addNodes(nodes);
  return cl.tc;
}

async function hold(model: string, n: number): Promise<HeldCalls> {
  const h = await holdCalls(cur().inference, cur().admin, model, n);
  held.push(h);
  return h;
}

const of = (inc: string) => (e: Event): boolean => e.incarnation === inc;

/** Events of one incarnation, by type. */
function typesFor(t: TestCoordinator, inc: string): string[] {
  return t.events.filter(of(inc)).map((e) => eventTypeOf(e));
}

/** One quick call (a single slow token) of `model`; the node that answered. */
async function quickCall(t: TestCoordinator, model: string): Promise<string> {
  const r = await t.inference.predict({ model, options: { Prompt: "quick", Tokens: 1 } }, { timeoutMs: 60_000 });
  return r.nodeId;
}

describe("replicas over real processes", { timeout: 240_000 }, () => {
  it("two replicas on two nodes (spread node) serve concurrently: held calls are split evenly between them", async () => {
    // Each node could hold two: only spread keeps them apart. min 0 in the config, raised once both nodes are up.
    const t = await cluster([replicaModel("m", { min: 0, max: 2, targetInFlight: 8 }, { spread: "node" })], { a: { maxReplicasPerModel: 2 }, b: { maxReplicasPerModel: 2 } });
    await t.admin.scaleModel({ model: "m", min: 2, operator: "test" });
    const two = await until("two ready replicas", async () => ((await readyOf(t.admin, "m")).length === 2 ? readyOf(t.admin, "m") : undefined), 90_000);
    expect(two.map((i) => i.nodeId)).toEqual(["a", "b"]);
    // Ground truth: one backend-sim process per replica, on its node.
    expect((await runningBackends(tag)).map((r) => [r.nodeId, r.incarnation]).sort()).toEqual(two.map((i) => [i.nodeId, i.incarnation]));

    await hold("m", 6);
    const rows = await instancesOf(t.admin, "m");
    expect(rows.map((i) => [i.nodeId, i.inFlight])).toEqual([["a", 3], ["b", 3]]);
    // With both at 3, a seventh call still goes through (to either) and comes back.
    expect(["a", "b"]).toContain(await quickCall(t, "m"));
    const s = await summaryOf(t.admin, "m");
    expect([s.min, s.max, s.ready, s.loading, s.stopping, s.queued, s.blocked]).toEqual([2, 2, 2, 0, 0, 0, undefined]);
    expect(t.events.filter((e) => eventTypeOf(e) === "replica.scaled-up").map((e) => (e.payload.case === "replicaScaledUp" ? e.payload.value.cause : ""))).toEqual(["min", "min"]);
  });

  it("scales up under load to max on the other node while calls keep going, then an idle replica is scaled down to min (reason scale-down, audited) and the busy one keeps serving", async () => {
    const t = await cluster([replicaModel("hot", { min: 1, max: 2, targetInFlight: 1, scaleDownAfter: "1s" }, { spread: "node" })], { a: {}, b: {} });
    const [first] = await until("the min replica ready", async () => {
      const r = await readyOf(t.admin, "hot");
      return r.length === 1 ? r : undefined;
    }, 90_000);
    const keep = first!;
    // The first call reaches the target (1 in flight); the second finds every replica at it: a scale-up starts, the call still goes to the ready replica.
    await hold("hot", 2);
    expect((await instancesOf(t.admin, "hot")).find((i) => i.incarnation === keep.incarnation)?.inFlight).toBe(2);
    const up = await t.waitForEvent("replica.scaled-up", (e) => e.payload.case === "replicaScaledUp" && e.payload.value.cause === "in-flight", 60_000);
    expect(up.nodeId).not.toBe(keep.nodeId);
    expect(up.payload.case === "replicaScaledUp" ? up.payload.value.replicas : 0).toBe(2);
    await t.waitForEvent("backend.loaded", of(up.incarnation), 90_000);
    // Nothing is in flight on the new one (the held calls stay where they were): idle for scaleDownAfter, it is stopped, down to min.
    const down = await t.waitForEvent("replica.scaled-down", of(up.incarnation), 60_000);
    expect(down.payload.case === "replicaScaledDown" ? down.payload.value.replicas : -1).toBe(1);
    const stopped = await t.waitForEvent("eviction.stopped", of(up.incarnation), 60_000);
    expect(stopped.payload.case === "evictionStopped" ? stopped.payload.value.reason : undefined).toBe(EvictionReason.SCALE_DOWN);
    expect(typesFor(t, up.incarnation).filter((x) => x.startsWith("eviction.") || x.startsWith("replica."))).toEqual(["replica.scaled-up", "replica.scaled-down", "eviction.started", "eviction.stopped"]);
    await until("its backend gone", async () => !(await runningBackends(tag)).some((r) => r.incarnation === up.incarnation));
    // The busy replica was never touched and serves on.
    expect(typesFor(t, keep.incarnation).filter((x) => x.startsWith("eviction."))).toEqual([]);
    expect((await instancesOf(t.admin, "hot")).map((i) => [i.incarnation, i.state, i.inFlight])).toEqual([[keep.incarnation, InstanceState.READY, 2]]);
    const s = await summaryOf(t.admin, "hot");
    expect([s.ready, s.loading, s.stopping, s.min, s.max]).toEqual([1, 0, 0, 1, 2]);
    // Load is still there: the next call finds the one replica at its target, goes to it, and starts the next scale-up.
    expect(await quickCall(t, "hot")).toBe(keep.nodeId);
    const again = await t.waitForEvent("replica.scaled-up", (e) => e !== up && e.payload.case === "replicaScaledUp" && e.payload.value.cause === "in-flight", 60_000);
    expect(again.nodeId).not.toBe(keep.nodeId);
  });

  it("one node: maxReplicasPerModel caps a spread-any model at the node's limit (two there), spread node never falls back to a second on the same node; both scale-ups show blocked in ListModels and ExplainPlacement; a second node joins and both recover", async () => {
    // Few placement retries: a load that cannot fit fails, and opens the breaker, in about a second.
    const t = await cluster([replicaModel("any3", { min: 0, max: 3, targetInFlight: 8 }, { spread: "any" }), replicaModel("node2", { min: 0, max: 2, targetInFlight: 8 }, { spread: "node" })], { a: { maxReplicasPerModel: 2 } }, { policy: { enforcementRetries: 3 } });
    await t.admin.scaleModel({ model: "any3", min: 3, operator: "test" });
    await t.admin.scaleModel({ model: "node2", min: 2, operator: "test" });
    const blocked = async (model: string): Promise<Event> => t.waitForEvent("replica.scale-blocked", (e) => e.model === model, 90_000);
    const [anyBlocked, nodeBlocked] = await Promise.all([blocked("any3"), blocked("node2")]);
    // The loads that could fit ran first (one load per model at a time): what is there now is all there will be on a.
    expect((await readyOf(t.admin, "any3")).map((i) => i.nodeId)).toEqual(["a", "a"]);
    expect((await readyOf(t.admin, "node2")).map((i) => i.nodeId)).toEqual(["a"]);
    expect((await runningBackends(tag)).length).toBe(3);
    for (const [model, ev, ready] of [["any3", anyBlocked, 2], ["node2", nodeBlocked, 1]] as const) {
      const s = await summaryOf(t.admin, model);
      expect([s.ready, s.loading], model).toEqual([ready, 0]);
      expect(s.blocked?.failures, model).toBeGreaterThanOrEqual(1);
      expect(s.blocked?.error, model).toBe(ev.payload.case === "replicaScaleBlocked" ? ev.payload.value.error : "?");
      const x = await t.admin.explainPlacement({ model });
      expect(x.decision, model).toBe(PlacementDecision.NO_FIT);
      expect(x.reason, model).toMatch(/scale-up blocked after \d+ failure/);
    }
    expect((await t.admin.explainPlacement({ model: "node2" })).nodes.find((n) => n.nodeId === "a")?.reason).toMatch(/spread|replica/);
    expect((await t.admin.explainPlacement({ model: "any3" })).nodes.find((n) => n.nodeId === "a")?.reason).toMatch(/maxReplicasPerModel|replicas per model|limit/);

    // Room appears: the breaker's next attempt places each missing replica on b, and closes.
    await addNodes({ b: { maxReplicasPerModel: 2 } });
    for (const [model, nodes] of [["any3", ["a", "a", "b"]], ["node2", ["a", "b"]]] as const) {
      const rows = await until(`${model} recovered`, async () => {
        const r = await readyOf(t.admin, model);
        return r.length === nodes.length ? r : undefined;
      }, 120_000);
      expect(rows.map((i) => i.nodeId), model).toEqual(nodes);
      expect((await summaryOf(t.admin, model)).blocked, model).toBeUndefined();
    }
    expect((await runningBackends(tag)).length).toBe(5);
  });

  it("one replica's failed stop (its agent frozen) leaves the other serving, untouched; the failed one is a leftover or registered again, and is reaped once its agent answers", async () => {
    // A frozen agent stays "ready" (long grace): what fails is the StopBackend itself.
    const t = await cluster([replicaModel("m", { min: 0, max: 2, targetInFlight: 8, scaleDownAfter: "1s" }, { spread: "node" })], { a: {}, b: {} }, { stop: { timeout: "5s", rpcTimeout: "1s" }, extra: { nodeGrace: "120s" } });
    await t.admin.scaleModel({ model: "m", min: 2, operator: "test" });
    await until("two ready replicas", async () => (await readyOf(t.admin, "m")).length === 2, 90_000);
    // A held call pins one replica busy: the other is the idle one a scale-down picks.
    await hold("m", 1);
    const rows = await instancesOf(t.admin, "m");
    const keep = rows.find((i) => i.inFlight === 1)!;
    const victim = rows.find((i) => i.inFlight === 0)!;
    const frozen = cl.agents.find((a) => a.nodeId === victim.nodeId)!;
    frozen.pause();
    await t.admin.scaleModel({ model: "m", min: 1, operator: "test" });
    await t.waitForEvent("replica.scaled-down", of(victim.incarnation), 60_000);
    // While its stop is stuck, calls go to the other replica only.
    expect(await quickCall(t, "m")).toBe(keep.nodeId);
    const failed = await t.waitForEvent("eviction.failed", of(victim.incarnation), 60_000);
    expect(failed.payload.case === "evictionFailed" ? failed.payload.value.reason : undefined).toBe(EvictionReason.SCALE_DOWN);
    const after = await instancesOf(t.admin, "m");
    expect(after.find((i) => i.incarnation === keep.incarnation)).toMatchObject({ state: InstanceState.READY, inFlight: 1, pendingEviction: false });
    expect([InstanceState.LEFTOVER, InstanceState.READY]).toContain(after.find((i) => i.incarnation === victim.incarnation)?.state);
    expect(await quickCall(t, "m")).toBe(keep.nodeId);
    expect(typesFor(t, keep.incarnation).filter((x) => x.startsWith("eviction."))).toEqual([]);
    // The frozen agent answers again: the failed replica is stopped in the end, the other never was.
    frozen.resume();
    await until("the failed replica's backend gone", async () => !(await runningBackends(tag)).some((r) => r.incarnation === victim.incarnation), 90_000);
    expect((await runningBackends(tag)).map((r) => r.incarnation)).toEqual([keep.incarnation]);
    expect(await quickCall(t, "m")).toBe(keep.nodeId);
  });
});
