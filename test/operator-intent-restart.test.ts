/**
 * Real processes: a single (non-HA) coordinator and two agents. An operator
 * drains b, sets the policy, a node-limits override on a and a model's
 * replicas; the coordinator is killed with SIGKILL and started again on the
 * same state dir while both agents are frozen. Everything the operator set
 * is still in force (a real load does not land on the drained node), the
 * nodes known before the restart are listed before they report, a SIGHUP
 * keeps the live settings over the file (and logs each), and every change
 * reached the event stream naming who asked.
 */
import { readFile, writeFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import type { Client } from "@warden/grpc";
import { eventTypeOf } from "@warden/events";
import type { AdminService} from "@warden/proto";
import { InstanceState, NodeState, type Event } from "@warden/proto";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import { simModel, until } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

/** Every event of a WatchEvents stream, until the stream ends (the coordinator is killed, or `stop`). */
function watch(admin: Client<typeof AdminService>): { events: Event[]; stop: () => void } {
  const events: Event[] = [];
  const ctl = new AbortController();
  void (async () => {
    for await (const r of admin.watchEvents({}, { signal: ctl.signal, timeoutMs: 600_000 })) if (r.event !== undefined) events.push(r.event);
  })().catch(() => undefined);
  return {
    events,
    stop: () => {
      ctl.abort();
    },
  };
}

async function seen(w: { events: Event[] }, type: string, pred: (e: Event) => boolean = () => true): Promise<Event> {
  return await until(`${type} on the event stream`, () => w.events.find((e) => eventTypeOf(e) === type && pred(e)), 60_000);
}

const unauthenticated = (e: Event): boolean => e.actor.startsWith("unauthenticated ");

/** The config file a coordinator process was started with (its `--config` argument). */
async function configOf(pid: number): Promise<string> {
  const argv = (await readFile(`/proc/${String(pid)}/cmdline`, "utf8")).split("\0");
  const path = argv[argv.indexOf("--config") + 1];
  if (path === undefined || path === "") throw new Error(`no --config in ${argv.join(" ")}`);
  return path;
}

describe("durable operator intent on one coordinator (kill -9, restart on the same state dir)", { timeout: 300_000 }, () => {
  it("drain, policy, node limits and scale survive the restart and a SIGHUP; known nodes are listed before they report; every change is audited with its actor", async () => {
    const c = await chaos.start({ name: "operator-intent", models: [simModel("m", { memoryEstimate: "1GiB" }), simModel("r", { memoryEstimate: "1GiB" }), simModel("later", { memoryEstimate: "1GiB" })] });
    const a = await c.addAgent("a");
    const b = await c.addAgent("b");
    const w1 = watch(c.admin);
    const m = (await c.admin.loadModel({ model: "m", nodeId: "b" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(m).not.toBe("");

    // a is the node placement prefers (empty, and the smaller id wins a tie): drained, it must get nothing.
    await c.admin.drainNode({ nodeId: "a" });
    await c.admin.updatePolicy({ patch: { idleTimeoutMs: 123_000n, models: [] } });
    await c.admin.setNodeLimits({ nodeId: "b", limits: { maxReplicasPerModel: 3 }, operator: "ops" });
    await c.admin.scaleModel({ model: "r", min: 1, max: 2, operator: "ops" });
    // r's floor is placed at once, on b: a is draining.
    const r = await until("r's floor ready", async () => (await c.admin.listModels({})).instances.find((i) => i.model === "r" && i.state === InstanceState.READY), 60_000);
    expect(r.nodeId).toBe("b");

    // Each change on the stream, with who asked.
    const started = await seen(w1, "node.drain-started", (e) => e.nodeId === "a");
    expect(started.payload.case === "nodeDrainStarted" && !started.payload.value.resumed).toBe(true);
    const drained = await seen(w1, "node.drained", (e) => e.nodeId === "a");
    const policy = await seen(w1, "policy.updated");
    expect(policy.payload.case === "policyUpdated" ? policy.payload.value.changes : []).toEqual(["idleTimeoutMs=123000"]);
    const limits = await seen(w1, "node.limits-set", (e) => e.nodeId === "b");
    const scale = await seen(w1, "replica.scale-set", (e) => e.model === "r");
    for (const e of [started, drained, policy, limits, scale]) expect(unauthenticated(e), eventTypeOf(e)).toBe(true);
    w1.stop();

    // Neither agent can report to the next coordinator until resumed.
    a.pause();
    b.pause();
    await c.restartCoordinator();

    // Known before the restart, not reported since: listed, with the journal's instances on them.
    const listed = (await c.admin.listNodes({})).nodes.map((n) => [n.nodeId, n.state, n.draining, n.limitsOverride?.maxReplicasPerModel ?? 0]);
    expect(listed).toEqual([
      ["a", NodeState.NOT_REPORTED, true, 0],
      ["b", NodeState.NOT_REPORTED, false, 3],
    ]);
    const onB = await c.admin.getNode({ nodeId: "b" });
    expect(onB.node?.state).toBe(NodeState.NOT_REPORTED);
    expect(onB.instances.map((i) => [i.model, i.incarnation, i.state]).sort()).toEqual([
      ["m", m, InstanceState.UNCONFIRMED],
      ["r", r.incarnation, InstanceState.UNCONFIRMED],
    ]);

    a.resume();
    b.resume();
    await until("a and b ready again", async () => (await c.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
    const w2 = watch(c.admin);
    // Still in force after the crash.
    expect((await c.admin.listNodes({})).nodes.map((n) => [n.nodeId, n.draining])).toEqual([
      ["a", true],
      ["b", false],
    ]);
    expect((await c.admin.getPolicy({})).policy?.idleTimeoutMs).toBe(123_000n);
    expect((await c.admin.getNode({ nodeId: "b" })).node?.limitsOverride?.maxReplicasPerModel).toBe(3);
    expect((await c.admin.listModels({})).replicas.filter((x) => x.model === "r").map((x) => [x.min, x.max])).toEqual([[1, 2]]);
    // The drain is resumed (audited as such, with the actor who asked before the crash).
    const resumed = await c.coord.waitForEvent("node.drain-started", (e) => e.nodeId === "a", 60_000);
    expect(resumed).toMatchObject({ nodeDrainStarted: { resumed: true } });
    expect(String(resumed["actor"])).toMatch(/^unauthenticated /);
    // A real load: a is empty and would be chosen, but it is drained.
    const later = (await c.admin.loadModel({ model: "later" }, { timeoutMs: 60_000 })).instance;
    expect(later?.nodeId).toBe("b");

    // SIGHUP re-reads the unchanged file: the live settings stay, each named in the log.
    const before = c.coord.logLines.length;
    process.kill(c.coord.pid, "SIGHUP");
    const reloaded = await until("the reload logged", () => c.coord.logLines.slice(before).find((l) => typeof l["msg"] === "string" && l["msg"].startsWith("config reloaded:")), 60_000);
    expect(reloaded["msg"]).toBe("config reloaded: the operator's live settings are kept over the file");
    expect(reloaded["kept"]).toEqual(expect.arrayContaining(["policy idleTimeoutMs=123000", "scale r min=1 max=2", "drain a", `limits b ${JSON.stringify({ maxReplicasPerModel: 3 })}`]));
    expect(reloaded["reset"]).toEqual([]);
    expect((await c.admin.getPolicy({})).policy?.idleTimeoutMs).toBe(123_000n);
    expect((await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "a")?.draining).toBe(true);

    // A file that changes r's replicas: the file wins for r (named in `reset`), the rest stays.
    const configPath = await configOf(c.coord.pid);
    const config = JSON.parse(await readFile(configPath, "utf8")) as { models: Record<string, unknown>[] };
    await writeFile(configPath, JSON.stringify({ ...config, models: config.models.map((x) => (x["id"] === "r" ? { ...x, replicas: { min: 0, max: 3 } } : x)) }));
    const mark = c.coord.logLines.length;
    process.kill(c.coord.pid, "SIGHUP");
    const second = await until("the second reload logged", () => c.coord.logLines.slice(mark).find((l) => typeof l["msg"] === "string" && l["msg"].startsWith("config reloaded:")), 60_000);
    expect(second["msg"]).toBe("config reloaded: some of the operator's live settings were reset to the file's");
    expect(second["reset"]).toEqual(["scale r (the file changed its replicas: the file's apply)"]);
    expect(second["kept"]).toEqual(expect.arrayContaining(["policy idleTimeoutMs=123000", "drain a"]));
    expect((await c.admin.listModels({})).replicas.filter((x) => x.model === "r").map((x) => [x.min, x.max])).toEqual([[0, 3]]);
    expect((await c.admin.getPolicy({})).policy?.idleTimeoutMs).toBe(123_000n);

    // Undrain: audited, and the next restart keeps it off.
    await c.admin.undrainNode({ nodeId: "a" });
    expect(unauthenticated(await seen(w2, "node.undrained", (e) => e.nodeId === "a"))).toBe(true);
    w2.stop();
    // b frozen across this restart: an operator may declare it lost without waiting for the node-lost timeout.
    b.pause();
    await c.restartCoordinator();
    await until("a ready, not draining", async () => (await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "a" && n.state === NodeState.READY && !n.draining), 60_000);
    expect((await c.admin.getNode({ nodeId: "b" })).node?.state).toBe(NodeState.NOT_REPORTED);
    const w3 = watch(c.admin);
    expect((await c.admin.declareNodeLost({ nodeId: "b", reason: "host gone" })).node?.state).toBe(NodeState.LOST);
    const lost = await seen(w3, "node.lost", (e) => e.nodeId === "b");
    expect(lost.payload.case === "nodeLost" && lost.payload.value.byOperator && lost.payload.value.reason === "host gone" && unauthenticated(lost)).toBe(true);
    expect((await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "b")?.state).toBe(NodeState.LOST);
    // Heard from again: ready, the declaration over.
    b.resume();
    await until("b ready again", async () => (await c.admin.listNodes({})).nodes.find((n) => n.nodeId === "b" && n.state === NodeState.READY), 60_000);
    w3.stop();
  });
});
