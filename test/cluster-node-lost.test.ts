/**
 * AdminService.DeclareNodeLost (`warden nodes lost`) over real processes: a
 * coordinator without an embedded agent and agent processes. An operator's
 * word moves an unreachable node to lost at once (its instances become
 * leftovers, their models are placed elsewhere, a returning agent's backend is
 * reaped); a ready node, an unknown node and an empty id are refused without
 * changing anything; the mass-unreachability pause does not hold it back.
 */
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { InstanceState, NodeState } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");
const tag = `node-lost-${String(process.pid)}-${String(Date.now())}`;
let t: TestCoordinator | undefined;
let agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents) await a.cleanup();
  agents = [];
  await t?.close();
  t = undefined;
  expect(await liveRemoteAgents()).toEqual([]);
});

/** The CLI as its own process; asynchronous, since the coordinator runs in this process. */
function warden(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    child.once("error", fail);
    child.once("close", (code) => {
      done({ code: code ?? -1, stdout, stderr });
    });
  });
}

/** The error a call rejects with (the test fails if it resolves). */
async function rejection(p: Promise<unknown>): Promise<WardenError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(WardenError);
  return err as WardenError;
}

async function nodeState(tc: TestCoordinator, nodeId: string): Promise<NodeState | undefined> {
  return (await tc.admin.listNodes({})).nodes.find((n) => n.nodeId === nodeId)?.state;
}

describe("DeclareNodeLost (coordinator + agent processes)", () => {
  it("refuses empty, unknown and ready nodes without changing anything; an unreachable node is lost at once, its instance a leftover, its model re-placed; a repeat is idempotent; the returning agent's backend is reaped", async () => {
    // nodeLostAfter stays at its 10 min default: only the operator's word makes a node lost here.
    const tc = await startTestCoordinator({ embeddedAgent: false, models: [simModel("small", { memoryEstimate: "1GiB" })], extra: { nodeGrace: "2s" } });
    t = tc;
    const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-a", tag });
    const b = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "node-b", tag });
    agents.push(a, b);
    await until("both nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
    const loaded = (await tc.admin.loadModel({ model: "small", nodeId: "node-a" })).instance!;

    const empty = await rejection(tc.admin.declareNodeLost({ nodeId: "", reason: "x" }));
    expect(empty.code).toBe(Code.InvalidArgument);
    expect(empty.rawMessage).toMatch(/^node_id: is required/);
    const unknown = await rejection(tc.admin.declareNodeLost({ nodeId: "node-zz", reason: "x" }));
    expect(unknown.code).toBe(Code.NotFound);
    expect(unknown.rawMessage).toMatch(/node-zz/);

    const ready = await rejection(tc.admin.declareNodeLost({ nodeId: "node-a", reason: "I think it is dead" }));
    expect(ready.code).toBe(Code.FailedPrecondition);
    expect(ready.rawMessage).toMatch(/heartbeating/);
    expect(ready.rawMessage).toMatch(/drain/);
    // Nothing changed: the node is ready, its instance ready and routable there, no node.lost event.
    expect(await nodeState(tc, "node-a")).toBe(NodeState.READY);
    const still = (await tc.admin.listModels({})).instances;
    expect(still.map((i) => [i.nodeId, i.incarnation, i.state])).toEqual([["node-a", loaded.incarnation, InstanceState.READY]]);
    expect((await tc.inference.predict({ model: "small", options: { Prompt: "x" } })).nodeId).toBe("node-a");
    expect(tc.events.filter((e) => eventTypeOf(e) === "node.lost")).toEqual([]);

    // The agent dies (its backend keeps running): unreachable after the grace, never lost by itself here.
    // Only an unreachable logged after the kill counts (a loaded machine can make a short grace flap before it).
    const beforeKill = tc.events.length;
    await a.kill();
    await tc.waitForEvent("node.unreachable", (e) => e.nodeId === "node-a" && tc.events.indexOf(e) >= beforeKill);
    expect(await nodeState(tc, "node-a")).toBe(NodeState.UNREACHABLE);

    const r = await tc.admin.declareNodeLost({ nodeId: "node-a", reason: "PSU failed, host powered off" });
    expect(r.wasAlreadyLost).toBe(false);
    expect(r.node?.nodeId).toBe("node-a");
    expect(r.node?.state).toBe(NodeState.LOST);
    expect(r.node?.instanceCount).toBe(1);
    const lost = await tc.waitForEvent("node.lost", (e) => e.nodeId === "node-a");
    expect(lost.payload.case === "nodeLost" && lost.payload.value).toMatchObject({ byOperator: true, reason: "PSU failed, host powered off" });
    // Its instance is a leftover there (accounted, stop retried), and the model is placed elsewhere.
    const after = (await tc.admin.listModels({})).instances;
    expect(after.find((i) => i.incarnation === loaded.incarnation)?.state).toBe(InstanceState.LEFTOVER);
    expect(after.find((i) => i.incarnation === loaded.incarnation)?.nodeId).toBe("node-a");
    const moved = await tc.inference.predict({ model: "small", options: { Prompt: "x" } });
    expect(moved.nodeId).toBe("node-b");

    // Idempotent: an already lost node answers OK and says so, over gRPC and the CLI; no second event.
    const again = await tc.admin.declareNodeLost({ nodeId: "node-a", reason: "" });
    expect(again.wasAlreadyLost).toBe(true);
    expect(again.node?.state).toBe(NodeState.LOST);
    const cli = await warden(["nodes", "lost", "node-a", "--json", "--addr", tc.c.address]);
    expect(cli.stderr).toBe("");
    expect(cli.code).toBe(0);
    const parsed = JSON.parse(cli.stdout) as { wasAlreadyLost?: boolean; node?: { state?: string } };
    expect(parsed.wasAlreadyLost).toBe(true);
    expect(parsed.node?.state).toBe("NODE_STATE_LOST");
    const human = await warden(["nodes", "lost", "node-b", "--addr", tc.c.address]);
    expect(human.code).toBe(7);
    expect(human.stderr.trim().split("\n")).toHaveLength(1);
    expect(human.stderr).toMatch(/node-b.*heartbeating/);
    expect(tc.events.filter((e) => eventTypeOf(e) === "node.lost")).toHaveLength(1);

    // The agent comes back: the node is ready again and the leftover's backend is stopped and reaped.
    await a.restart();
    await tc.waitForEvent("leftover.reaped", (e) => e.nodeId === "node-a" && e.incarnation === loaded.incarnation);
    await until("node-a backend gone", async () => (await a.liveBackends()).length === 0);
    await until("node-a ready again", async () => (await nodeState(tc, "node-a")) === NodeState.READY);
    expect((await tc.admin.listModels({})).instances.map((i) => [i.nodeId, i.state])).toEqual([["node-b", InstanceState.READY]]);
  });

  it("an operator's word is not held back by the mass-unreachability pause (3 of 3 nodes unreachable)", async () => {
    const tc = await startTestCoordinator({ embeddedAgent: false, models: [simModel("m")], extra: { nodeGrace: "1s" } });
    t = tc;
    for (const id of ["n1", "n2", "n3"]) agents.push(await startRemoteAgent({ coordinator: tc.c.address, nodeId: id, tag }));
    await until("three nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 3);
    // Each has had a heartbeat applied: only such nodes count toward the pause (auth off: no credential vouches for them).
    await until("three inventories", () => ["n1", "n2", "n3"].every((id) => tc.c.nodes.get(id)?.inventory !== undefined));
    for (const a of agents) a.pause();
    await tc.waitForEvent("unreachability.paused", (e) => e.payload.case === "unreachabilityPaused" && e.payload.value.paused);
    await until("all three unreachable", async () => (await tc.admin.listNodes({})).nodes.every((n) => n.state === NodeState.UNREACHABLE));
    expect(tc.c.nodes.unreachabilityPaused).toBe(true);
    const r = await tc.admin.declareNodeLost({ nodeId: "n1", reason: "rack 4 decommissioned" });
    expect(r.wasAlreadyLost).toBe(false);
    expect(r.node?.state).toBe(NodeState.LOST);
    const lost = await tc.waitForEvent("node.lost", (e) => e.nodeId === "n1");
    expect(lost.payload.case === "nodeLost" && lost.payload.value.byOperator).toBe(true);
    expect((await tc.admin.listNodes({})).nodes.map((n) => [n.nodeId, n.state])).toEqual([
      ["n1", NodeState.LOST],
      ["n2", NodeState.UNREACHABLE],
      ["n3", NodeState.UNREACHABLE],
    ]);
    expect(tc.events.filter((e) => eventTypeOf(e) === "node.lost").map((e) => e.nodeId)).toEqual(["n1"]);
  });
});
