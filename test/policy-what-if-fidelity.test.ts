/**
 * Fidelity: a real coordinator (embedded agent, backend-sim processes) runs a
 * scripted workload while it records its trace; the exported trace replayed
 * under the same config gives the same cold starts and idle evictions.
 * Tolerance: exact for these counts — each gap between calls (5 s) is five
 * times the idle timeout (1 s), so on a loaded machine too every gap ends in
 * an idle eviction, live and replayed; calls sent together share one load.
 *
 * The second run is a cluster of two agent processes through an operator's
 * LoadModel, a drain and an undrain, and the loss of a node (its agent
 * killed, then declared lost): the replay makes the same loads on the same
 * nodes and the same drain eviction as the real cluster did. Exact as well —
 * each call is made after the cluster settled (the drain done, the node
 * lost), so no count depends on how fast the machine is.
 */
import { afterEach, describe, expect, it } from "vitest";
import { NodeState } from "@warden/proto";
import { isTraceHeader, parseTraceLine, replayInput, replayTrace, type TraceLine } from "@warden/whatif";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";

const tag = `whatif-fidelity-${String(process.pid)}-${String(Date.now())}`;
let t: TestCoordinator | undefined;
let agents: RemoteAgent[] = [];
afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await t?.close();
  t = undefined;
  expect(await liveRemoteAgents()).toEqual([]);
});

async function exported(tc: TestCoordinator): Promise<TraceLine[]> {
  let text = "";
  for await (const c of tc.admin.exportTrace({}, { timeoutMs: 30_000 })) text += new TextDecoder().decode(c.data);
  const lines: TraceLine[] = [];
  text
    .trimEnd()
    .split("\n")
    .forEach((l, i) => {
      const p = parseTraceLine(l, i + 1);
      if (p !== undefined && !isTraceHeader(p)) lines.push(p);
    });
  return lines;
}

const sleepMs = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("policy what-if fidelity (real coordinator, record, export, replay)", () => {
  it("replayed under the unchanged config, the trace gives the recorded cold starts and idle evictions", async () => {
    t = await startTestCoordinator({ models: [simModel("m1", { memoryEstimate: "1GiB" })], policy: { idleCheck: true, idleTimeout: "1s" } });
    const tc = t;
    for (let round = 0; round < 3; round++) {
      // Two calls together: one load between them.
      await Promise.all([0, 1].map((i) => tc.inference.predict({ model: "m1", options: { Prompt: `round ${String(round)} call ${String(i)}` } }, { timeoutMs: 60_000 })));
      await tc.waitForEvent("eviction.stopped", (e) => tc.events.filter((x) => x.payload.case === "evictionStopped").indexOf(e) === round, 60_000);
      await sleepMs(round < 2 ? 4_000 : 0);
    }
    let text = "";
    for await (const c of tc.admin.exportTrace({}, { timeoutMs: 30_000 })) text += new TextDecoder().decode(c.data);
    const lines: TraceLine[] = [];
    text
      .trimEnd()
      .split("\n")
      .forEach((l, i) => {
        const p = parseTraceLine(l, i + 1);
        if (p !== undefined && !isTraceHeader(p)) lines.push(p);
      });
    const recordedLoads = lines.filter((l) => l.t === "load").length;
    const recordedIdle = lines.filter((l) => l.t === "stop" && l.reason === "idle").length;
    expect(recordedLoads).toBe(3);
    expect(recordedIdle).toBe(3);
    const c = tc.c.config;
    const r = await replayTrace(replayInput(lines), { models: c.models, policy: c.policy, placement: c.placement, enforcement: c.enforcement, cooldown: c.cooldown, stop: c.stop, loadWaitMs: c.loadWaitMs });
    expect(r.calls).toBe(6);
    expect(r.coldStarts).toBe(recordedLoads);
    // The replay ends with the last call: the third idle eviction (after it) is past its end.
    expect(r.evictionsByReason).toEqual({ idle: recordedIdle - 1 });
    expect(r.failedCalls).toBe(0);
  });

  it("with an operator's load, a drain and a lost node, the replay loads on the nodes the real cluster loaded on and drains what it drained", async () => {
    // No idle check: every load and stop here is the operator's or the cluster's answer to one.
    const tc = await startTestCoordinator({ embeddedAgent: false, models: [simModel("m1", { memoryEstimate: "1GiB" })], extra: { nodeGrace: "2s" } });
    t = tc;
    const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-a", tag });
    const b = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-b", tag });
    agents.push(a, b);
    await until("both nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
    const call = async (): Promise<string> => (await tc.inference.predict({ model: "m1", options: { Prompt: "x" } }, { timeoutMs: 60_000 })).nodeId;
    await tc.admin.loadModel({ model: "m1", nodeId: "node-a" }, { timeoutMs: 60_000 });
    expect(await call()).toBe("node-a");
    // The drain stops it; the next call loads it on node-b.
    await tc.admin.drainNode({ nodeId: "node-a" });
    await tc.waitForEvent("node.drained", (e) => e.nodeId === "node-a", 60_000);
    expect(await call()).toBe("node-b");
    await tc.admin.undrainNode({ nodeId: "node-a" });
    // node-b's agent dies and the operator declares it lost: the next call loads on node-a again.
    const beforeKill = tc.events.length;
    await b.kill();
    await tc.waitForEvent("node.unreachable", (e) => e.nodeId === "node-b" && tc.events.indexOf(e) >= beforeKill, 60_000);
    await tc.admin.declareNodeLost({ nodeId: "node-b", reason: "test" });
    await tc.waitForEvent("node.lost", (e) => e.nodeId === "node-b", 60_000);
    expect(await call()).toBe("node-a");

    // A call's line is written when the call ends on the server, and a load's when its audit event
    // is published, each a moment after the caller has its answer: read the trace until it holds
    // all three calls and all three loads.
    const lines = await until("the three calls and three loads in the trace", async () => {
      const ls = await exported(tc);
      return ls.filter((l) => l.t === "call").length >= 3 && ls.filter((l) => l.t === "load").length >= 3 ? ls : undefined;
    }, 30_000);
    const recordedLoads = lines.flatMap((l) => (l.t === "load" ? [l.node] : []));
    expect(recordedLoads).toEqual(["node-a", "node-b", "node-a"]);
    const recordedStops = lines.flatMap((l) => (l.t === "stop" ? [l.reason] : []));
    expect(recordedStops).toEqual(["drain"]);
    // The replay's nodes: both with their memory, both lost-and-joined as recorded.
    const input = replayInput(lines);
    expect([...input.nodes.keys()].sort()).toEqual(["node-a", "node-b"]);
    expect([...input.nodes.values()].every((bytes) => bytes > 0)).toBe(true);
    const c = tc.c.config;
    const r = await replayTrace(input, { models: c.models, policy: c.policy, placement: c.placement, enforcement: c.enforcement, cooldown: c.cooldown, stop: c.stop, loadWaitMs: c.loadWaitMs });
    expect(r.calls).toBe(3);
    expect(r.failedCalls).toBe(0);
    expect(r.coldStarts).toBe(recordedLoads.length);
    expect(r.evictionsByReason).toEqual({ drain: 1 });
    // Each node held the model at some time, as in the real run.
    expect(r.nodes.map((n) => [n.nodeId, n.peakBytes > 0])).toEqual([
      ["node-a", true],
      ["node-b", true],
    ]);
    expect(r.operatorChanges?.refused).toBe(0);
    // Without the timeline the replay knows of no drain and no loss: one load serves every call.
    const flat = await replayTrace(input, { models: c.models, policy: c.policy, placement: c.placement, enforcement: c.enforcement, cooldown: c.cooldown, stop: c.stop, loadWaitMs: c.loadWaitMs }, { timeline: false });
    expect(flat.coldStarts).toBe(1);
  });
});
