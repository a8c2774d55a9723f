/**
 * A lowered max over real processes: a coordinator (in this test process, no
 * embedded agent), two agent processes spawning real backend-sim processes,
 * real loopback gRPC, and the CLI's `models scale` run in process over the
 * same gRPC. Two ready replicas, `warden models scale m --min 0 --max 1`: the
 * less busy replica is stopped promptly (replica.scaled-down cause "max", the
 * normal stop with reason SCALE_DOWN) although scaleDownAfter is an hour, and
 * the busy one serves on. Every wait is on an event or a condition.
 */
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { runCli } from "@warden/cli";
import { eventTypeOf } from "@warden/events";
import { EvictionReason, InstanceState, NodeState, type Event } from "@warden/proto";
import { startRemoteAgent } from "./support/agent-process.js";
import { runningBackends } from "./support/chaos-checks.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { replicaCluster } from "./support/replica-cluster.js";
import { holdCalls, instancesOf, readyOf, replicaModel, summaryOf, type HeldCalls } from "./support/replica-calls.js";

let held: HeldCalls[] = [];
const cl = replicaCluster("replicas-max", async () => {
  for (const h of held) await h.release().catch(() => undefined);
  held = [];
});

/** `warden …` in process against `t` (its gRPC client is real); exit code and output. */
async function warden(t: TestCoordinator, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = new PassThrough();
  const err = new PassThrough();
  let stdout = "";
  let stderr = "";
  out.on("data", (b: Buffer) => (stdout += b.toString()));
  err.on("data", (b: Buffer) => (stderr += b.toString()));
  const noRunner = (): Promise<number> => Promise.reject(new Error("not in this test"));
  const code = await runCli([...args, "--addr", t.c.address], { out, err, env: {}, interactive: false }, { up: noRunner, coordinator: noRunner, agent: noRunner, natsEvents: noRunner, simulate: () => Promise.resolve("") });
  return { code, stdout, stderr };
}

const of = (inc: string) => (e: Event): boolean => e.incarnation === inc;

describe("a lowered max over real processes", { timeout: 240_000 }, () => {
  it("models scale --max 1 with two ready replicas stops the less busy one promptly (cause max, reason scale-down); the busy one serves on", async () => {
    // scaleDownAfter is an hour: only the lowered max can stop a replica in this test.
    const t = await startTestCoordinator({ embeddedAgent: false, models: [replicaModel("m", { min: 2, max: 2, targetInFlight: 8, scaleDownAfter: "1h" }, { spread: "node" })], policy: {} });
    cl.tc = t;
    cl.agents.push(...(await Promise.all(["a", "b"].map((nodeId) => startRemoteAgent({ coordinator: t.c.address, nodeId, tag: cl.tag, config: {} })))));
    await until("a and b ready", async () => (await t.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
    const two = await until("two ready replicas", async () => ((await readyOf(t.admin, "m")).length === 2 ? readyOf(t.admin, "m") : undefined), 90_000);
    // One call held open: its replica is the busier one.
    const h = await holdCalls(t.inference, t.admin, "m", 1);
    held.push(h);
    const busy = (await instancesOf(t.admin, "m")).find((i) => i.inFlight === 1);
    const idle = two.find((i) => i.incarnation !== busy?.incarnation);
    if (busy === undefined || idle === undefined) throw new Error("one busy and one idle replica expected");

    const r = await warden(t, ["models", "scale", "m", "--min", "0", "--max", "1", "--operator", "test"]);
    expect(r.code, r.stderr).toBe(0);
    const down = await t.waitForEvent("replica.scaled-down", of(idle.incarnation), 60_000);
    expect(down.payload.case === "replicaScaledDown" ? [down.payload.value.cause, down.payload.value.replicas] : []).toEqual(["max", 1]);
    const stopped = await t.waitForEvent("eviction.stopped", of(idle.incarnation), 60_000);
    expect(stopped.payload.case === "evictionStopped" ? stopped.payload.value.reason : undefined).toBe(EvictionReason.SCALE_DOWN);
    await until("its backend gone", async () => !(await runningBackends(cl.tag)).some((b) => b.incarnation === idle.incarnation));

    // The busy replica was never touched: its call is still in flight, and new calls go to it.
    expect(t.events.filter(of(busy.incarnation)).map((e) => eventTypeOf(e)).filter((x) => x.startsWith("eviction.") || x === "replica.scaled-down")).toEqual([]);
    expect((await instancesOf(t.admin, "m")).map((i) => [i.incarnation, i.state, i.inFlight])).toEqual([[busy.incarnation, InstanceState.READY, 1]]);
    const quick = await t.inference.predict({ model: "m", options: { Prompt: "quick", Tokens: 1 } }, { timeoutMs: 60_000 });
    expect(quick.nodeId).toBe(busy.nodeId);
    const s = await summaryOf(t.admin, "m");
    expect([s.ready, s.loading, s.stopping, s.min, s.max]).toEqual([1, 0, 0, 0, 1]);
    expect(t.events.filter((e) => eventTypeOf(e) === "replica.scaled-down")).toHaveLength(1);
  });
});
