/**
 * The cluster over real processes: a coordinator without an embedded agent
 * and two agent processes with distinct labels — placement with selectors,
 * ExplainPlacement agreeing with a load, drain, unreachable and lost nodes,
 * mass-unreachability pause inputs, and a coordinator restart that rebuilds
 * from inventories.
 */
import { afterEach, describe, expect, it } from "vitest";
import { EvictionReason, InstanceState, NodeState, Placement, PlacementDecision } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";

const tag = `cluster-${String(process.pid)}-${String(Date.now())}`;
let t: TestCoordinator | undefined;
let agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await t?.close();
  t = undefined;
  expect(await liveRemoteAgents()).toEqual([]);
});

async function twoNodes(extra: Parameters<typeof startTestCoordinator>[0]["extra"] = {}, policy: Record<string, unknown> = {}): Promise<TestCoordinator> {
  const tc = await startTestCoordinator({
    embeddedAgent: false,
    models: [
      simModel("big", { selector: { gpu: "a100" }, memoryEstimate: "4GiB" }),
      simModel("small", { memoryEstimate: "1GiB" }),
      simModel("pinned", { pinned: true, selector: { gpu: "t4" } }),
    ],
    policy,
    extra,
  });
  t = tc;
  agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-a", labels: { gpu: "a100" }, tag }));
  agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-t", labels: { gpu: "t4" }, tag }));
  await until("both nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
  return tc;
}

describe("cluster (coordinator + two agent processes)", () => {
  it("places by selector, and ExplainPlacement agrees with what the load does, with a reason per node", async () => {
    const tc = await twoNodes();
    const explained = await tc.admin.explainPlacement({ model: "big" });
    expect(explained.decision).toBe(PlacementDecision.PLACE);
    expect(explained.nodeId).toBe("node-a");
    const reasons = Object.fromEntries(explained.nodes.map((n) => [n.nodeId, n.reason]));
    expect(reasons["node-t"]).toMatch(/selector gpu=a100 does not match/);
    expect(reasons["node-a"]).toMatch(/fits/);
    const loaded = await tc.admin.loadModel({ model: "big" });
    expect(loaded.instance?.nodeId).toBe(explained.nodeId);
    expect(loaded.instance?.placement).toBe(Placement.LOCAL_REMOTE);
    const again = await tc.admin.explainPlacement({ model: "big" });
    expect(again.decision).toBe(PlacementDecision.ALREADY_LOADED);
    // One replica is the default max: the answer names it and its node.
    expect(again.reason).toMatch(/^already at max replicas \(1\/1\): on node "node-a" \(ready/);
    const r = await tc.inference.predict({ model: "big", options: { Prompt: "hi" } });
    expect(r.nodeId).toBe("node-a");
  });

  it("drain evicts the node's instances (pinned ones too) with reason drain and shows progress; undrain allows placement again", async () => {
    const tc = await twoNodes();
    await tc.admin.loadModel({ model: "pinned" });
    await tc.admin.loadModel({ model: "small", nodeId: "node-t" });
    const d = await tc.admin.drainNode({ nodeId: "node-t" });
    expect(d.node?.draining).toBe(true);
    await tc.waitForEvent("node.drained", (e) => e.nodeId === "node-t");
    const stopped = tc.events.filter((e) => e.payload.case === "evictionStopped" && e.nodeId === "node-t");
    expect(stopped.map((e) => e.model).sort()).toEqual(["pinned", "small"]);
    expect(stopped.every((e) => e.payload.case === "evictionStopped" && e.payload.value.reason === EvictionReason.DRAIN)).toBe(true);
    const n = (await tc.admin.getNode({ nodeId: "node-t" })).node;
    expect(n?.draining).toBe(true);
    expect(n?.instanceCount).toBe(0);
    const explained = await tc.admin.explainPlacement({ model: "pinned" });
    // Its only matching node drains: a state that ends, so a load would wait (loadWait), not fail at once.
    expect(explained.decision).toBe(PlacementDecision.WAIT);
    expect(explained.nodes.find((v) => v.nodeId === "node-t")?.reason).toBe("node is draining");
    await tc.admin.undrainNode({ nodeId: "node-t" });
    expect((await tc.admin.loadModel({ model: "pinned" })).instance?.nodeId).toBe("node-t");
    expect(await agents[1]!.liveBackends()).toHaveLength(1);
  });

  it("agent killed: its node goes unreachable (instances accounted, serving on while the coordinator's probe answers), then lost; the model is re-placed; the restarted agent's backend is reaped as a leftover", async () => {
    // Lost by an operator's word, not by nodeLostAfter: a timeout short enough for a
    // test could pass while the unreachable-phase checks below still run on a loaded
    // machine. The timeout transition itself is covered with a manual clock
    // (node-registry.test.ts, packages/cluster node-table.test.ts).
    const tc = await twoNodes({ nodeGrace: "1s", nodeLostAfter: "10m" });
    await tc.admin.loadModel({ model: "small", nodeId: "node-a" });
    const a = agents[0]!;
    // With a 1 s grace a loaded machine can delay a heartbeat past it before the kill (the node
    // flaps unreachable → ready): only an unreachable logged after the kill counts.
    const beforeKill = tc.events.length;
    await a.kill(); // the agent dies; its backend keeps running
    await tc.waitForEvent("node.unreachable", (e) => e.nodeId === "node-a" && tc.events.indexOf(e) >= beforeKill);
    const listed = (await tc.admin.listModels({})).instances.find((i) => i.model === "small");
    expect(listed?.state).toBe(InstanceState.READY);
    // The backend outlives its agent: calls go on to it while the coordinator's own probe answers
    // (test/outage-serving.test.ts); the lost-node rules below take over once the node is lost.
    expect((await tc.inference.predict({ model: "small", options: { Prompt: "x" } }, { timeoutMs: 60_000 })).nodeId).toBe("node-a");
    await tc.admin.declareNodeLost({ nodeId: "node-a", reason: "agent killed by the test" });
    await tc.waitForEvent("node.lost", (e) => e.nodeId === "node-a");
    const after = (await tc.admin.listModels({})).instances;
    expect(after.find((i) => i.nodeId === "node-a" && i.model === "small")?.state).toBe(InstanceState.LEFTOVER);
    const moved = await tc.inference.predict({ model: "small", options: { Prompt: "x" } });
    expect(moved.nodeId).toBe("node-t");
    // The agent comes back and adopts the backend: the leftover is stopped and reaped, nothing forgotten.
    await a.restart();
    await tc.waitForEvent("leftover.reaped", (e) => e.nodeId === "node-a");
    await until("node-a backend gone", async () => (await a.liveBackends()).length === 0);
  });

  it("a restarted coordinator rebuilds from the agents' inventories: running instances are adopted remote-only and routable", async () => {
    const tc = await twoNodes();
    const loaded = await tc.admin.loadModel({ model: "big" });
    // The event is journaled after the load answers; a closing coordinator ends its
    // watchers, so wait for it to be delivered before the close.
    await tc.waitForEvent("backend.loaded", (e) => e.model === "big");
    // Stop the coordinator without stopping backends, start a new one on the same state dir and port.
    const address = tc.c.address;
    await tc.c.close({ stopBackends: false });
    const { startCoordinator } = await import("@warden/coordinator");
    const c2 = await startCoordinator({ ...tc.c.config, listen: address });
    try {
      await until("big adopted", () => c2.loader.core.instancesOfModel("big").length === 1 || undefined, 30_000);
      const v = c2.loader.core.instancesOfModel("big")[0];
      expect(v?.incarnation).toBe(loaded.instance?.incarnation);
      expect(c2.loader.heldInstance(v!.incarnation)?.placement).toBe("remote-only");
      const r = await tc.inference.predict({ model: "big", options: { Prompt: "again" } });
      expect(new TextDecoder().decode(r.reply?.message)).toContain("big");
      expect(c2.loader.heldInstance(v!.incarnation)?.placement).toBe("local-remote");
      expect(await agents[0]!.liveBackends()).toHaveLength(1);
    } finally {
      await c2.close({ stopBackends: false });
    }
    // the harness close() closes the first coordinator again (idempotent)
    expect(tc.events.some((e) => eventTypeOf(e) === "backend.loaded")).toBe(true);
  });
});
