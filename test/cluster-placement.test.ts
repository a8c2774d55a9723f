/**
 * Placement over real processes: a coordinator without an
 * embedded agent and two agent processes.
 * - Two models in one concurrency group land on different nodes under
 *   `placement: spread`.
 * - Under binpack, when only one node matches their selector, loading one
 *   evicts the other (reason group), and ExplainPlacement said so first.
 * - An agent restarted (SIGTERM, then a new process on the same state dir):
 *   its backends are adopted, none restarted — same incarnation and pid, no
 *   new backend.loaded event, still routable.
 */
import { afterEach, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AgentService, EvictionReason, NodeState, PlacementDecision } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";

const tag = `cluster-placement-${String(process.pid)}-${String(Date.now())}`;
let t: TestCoordinator | undefined;
let agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await t?.close();
  t = undefined;
  expect(await liveRemoteAgents()).toEqual([]);
});

async function twoNodes(models: Record<string, unknown>[], extra: Record<string, unknown> = {}): Promise<TestCoordinator> {
  const tc = await startTestCoordinator({ embeddedAgent: false, models, extra });
  t = tc;
  agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-a", labels: { gpu: "a100" }, tag }));
  agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-t", labels: { gpu: "t4" }, tag }));
  await until("both nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
  return tc;
}

function loadedEvents(tc: TestCoordinator): number {
  return tc.events.filter((e) => eventTypeOf(e) === "backend.loaded").length;
}

describe("cluster placement (coordinator + two agent processes)", () => {
  it("spread: two models in one group land on different nodes, and neither is evicted", async () => {
    const tc = await twoNodes([simModel("one", { groups: ["g"] }), simModel("two", { groups: ["g"] })], { placement: "spread" });
    const first = await tc.admin.loadModel({ model: "one" });
    const explained = await tc.admin.explainPlacement({ model: "two" });
    const second = await tc.admin.loadModel({ model: "two" });
    const nodes = [first.instance?.nodeId, second.instance?.nodeId];
    expect(new Set(nodes).size).toBe(2);
    expect(nodes.sort()).toEqual(["node-a", "node-t"]);
    expect(explained.decision).toBe(PlacementDecision.PLACE);
    expect(explained.nodeId).toBe(second.instance?.nodeId);
    const listed = (await tc.admin.listModels({})).instances.map((i) => `${i.model}@${i.nodeId}`).sort();
    expect(listed).toEqual([`one@${String(first.instance?.nodeId)}`, `two@${String(second.instance?.nodeId)}`].sort());
    expect(tc.events.some((e) => e.payload.case === "evictionStopped")).toBe(false);
    for (const a of agents) expect(await a.liveBackends()).toHaveLength(1);
  });

  it("binpack with one node matching the selector: loading one model of the group evicts the other (reason group)", async () => {
    const tc = await twoNodes([simModel("one", { groups: ["g"], selector: { gpu: "a100" } }), simModel("two", { groups: ["g"], selector: { gpu: "a100" } })], { placement: "binpack" });
    const first = await tc.admin.loadModel({ model: "one" });
    expect(first.instance?.nodeId).toBe("node-a");
    const explained = await tc.admin.explainPlacement({ model: "two" });
    expect(explained.decision).toBe(PlacementDecision.EVICT_THEN_PLACE);
    expect(explained.nodeId).toBe("node-a");
    const reasons = Object.fromEntries(explained.nodes.map((n) => [n.nodeId, n.reason]));
    expect(reasons["node-t"]).toMatch(/selector gpu=a100 does not match/);
    expect(reasons["node-a"]).toMatch(/group conflict with one/);
    const second = await tc.admin.loadModel({ model: "two" });
    expect(second.instance?.nodeId).toBe("node-a");
    const stopped = await tc.waitForEvent("eviction.stopped", (e) => e.model === "one");
    expect(stopped.nodeId).toBe("node-a");
    expect(stopped.payload.case === "evictionStopped" && stopped.payload.value.reason).toBe(EvictionReason.GROUP);
    const listed = (await tc.admin.listModels({})).instances.map((i) => `${i.model}@${i.nodeId}`);
    expect(listed).toEqual(["two@node-a"]);
    await until("one's process gone from node-a", async () => (await agents[0]!.liveBackends()).length === 1);
    expect(await agents[1]!.liveBackends()).toEqual([]);
  });

  it("an agent restarted (SIGTERM, then restart) has its backends adopted, none restarted: same incarnation and pid, no new backend.loaded", async () => {
    const tc = await twoNodes([simModel("one", { selector: { gpu: "a100" } })]);
    const loaded = await tc.admin.loadModel({ model: "one" });
    const incarnation = loaded.instance?.incarnation ?? "";
    expect(loaded.instance?.nodeId).toBe("node-a");
    const a = agents[0]!;
    const listBackends = async (): Promise<{ incarnation: string; pid: number }[]> => {
      const client = createClient(AgentService, a.address);
      try {
        return (await client.listBackends({})).backends.map((b) => ({ incarnation: b.incarnation, pid: b.pid }));
      } finally {
        client.close();
      }
    };
    const before = await listBackends();
    expect(before.map((b) => b.incarnation)).toEqual([incarnation]);
    const pidsBefore = await a.liveBackends();
    expect(pidsBefore).toHaveLength(1);
    expect(before[0]?.pid).toBe(pidsBefore[0]);
    // The load's own backend.loaded reaches the test after the journal's write, possibly after LoadModel answered.
    await tc.waitForEvent("backend.loaded", (e) => e.incarnation === incarnation);
    const loadedBefore = loadedEvents(tc);
    const registeredBefore = tc.events.filter((e) => eventTypeOf(e) === "node.registered" && e.nodeId === "node-a").length;
    const oldPid = a.pid;

    await a.stop();
    expect(await a.liveBackends()).toEqual(pidsBefore); // backends outlive their agent, by design
    await a.restart();
    expect(a.pid).not.toBe(oldPid);
    await until("node-a registered again", () => tc.events.filter((e) => eventTypeOf(e) === "node.registered" && e.nodeId === "node-a").length > registeredBefore);
    await until("node-a ready", async () => (await tc.admin.getNode({ nodeId: "node-a" })).node?.state === NodeState.READY);
    // The new agent process reports the same backend (adopted from its state dir) …
    const after = await until("the restarted agent lists its backend", async () => {
      const l = await listBackends();
      return l.length > 0 ? l : undefined;
    });
    expect(after).toEqual(before);
    // … and the coordinator's registry has taken a heartbeat from it with that inventory.
    await until("coordinator has node-a's new inventory", () => {
      const rec = tc.c.nodes.get("node-a");
      return rec !== undefined && rec.state === "ready" && rec.inventory?.some((e) => e.incarnation === incarnation) === true;
    });
    expect(await a.liveBackends()).toEqual(pidsBefore);
    const listed = (await tc.admin.listModels({})).instances;
    expect(listed.map((i) => [i.model, i.nodeId, i.incarnation])).toEqual([["one", "node-a", incarnation]]);
    // Still routable, to the same process.
    const r = await tc.inference.predict({ model: "one", options: { Prompt: "after restart" } });
    expect(r.nodeId).toBe("node-a");
    expect(await a.liveBackends()).toEqual(pidsBefore);
    expect((await listBackends()).map((b) => b.incarnation)).toEqual([incarnation]);
    expect(loadedEvents(tc)).toBe(loadedBefore);
    expect(tc.events.some((e) => e.payload.case === "evictionStopped" || eventTypeOf(e) === "backend.exited")).toBe(false);
  });
});
