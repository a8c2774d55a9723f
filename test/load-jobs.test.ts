/**
 * Load jobs against real processes (coordinator, remote agent, backend-sim, the CLI): a load no
 * node can take now is a job "waiting for a node" with its reason — listed by ListModels
 * (ModelReplicas.load_job) and `warden models ls`, announced once by load.waiting to a WatchEvents
 * watcher; a failed load is a job "failed" with its reason and code, and load.failed. A load no node
 * can ever take (a selector no node matches, a model larger than every node) answers at once on
 * gRPC and HTTP: FAILED_PRECONDITION, and the load never appears as waiting (no load.waiting before
 * its load.failed: one stream, emit order). A load blocked by room (a node's memory budget full of
 * a pinned instance, nothing evictable) is "not now": it waits loadWait, then UNAVAILABLE naming it.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WardenError } from "@warden/common";
import { Code } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, LoadJobPhase, LoadJobState, NodeState, type Event, type LoadJob } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { freePort } from "./support/free-port.js";
import { refusedWith } from "./support/refusal.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The load's refusal; a load that succeeded fails the test naming where it ran and every node the coordinator knows. */
/** A refused load; if it was accepted, the failure names every node the coordinator knows and its last log lines. */
function refusal(c: Cluster, p: Promise<unknown>): Promise<WardenError> {
  return refusedWith(p, async () => {
    const nodes = (await c.admin.listNodes({})).nodes.map((n) => ({ nodeId: n.nodeId, state: n.state, labels: n.labels, address: n.address }));
    return `nodes: ${JSON.stringify(nodes)}; coordinator log tail: ${JSON.stringify(c.coord.logLines.slice(-30))}`;
  });
}

/** One coordinator with one remote agent, and a WatchEvents watcher collecting every event from the start. */
interface Cluster {
  readonly coord: CoordinatorProcess;
  readonly agent: RemoteAgent;
  readonly admin: Client<typeof AdminService>;
  readonly events: Event[];
  readonly stopWatch: AbortController;
  readonly metricsAddress: string;
}

async function startCluster(dir: string, name: string, loadWait: string, models: Record<string, unknown>[]): Promise<Cluster> {
  const metricsAddress = `127.0.0.1:${String(await freePort())}`;
  const coord = await startCoordinatorProcess(join(dir, `${name}.yaml`), {
    listen: `127.0.0.1:${String(await freePort())}`,
    metricsListen: metricsAddress,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, `${name}-state`),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    loadWait,
    policy: { enforcementRetries: 2, enforcementRetryInterval: "200ms" },
    models,
  });
  const agent = await startRemoteAgent({ coordinator: coord.address, nodeId: `${name}-n1`, tag: uniqueTag(`load-jobs-${name}`) });
  const admin = createClient(AdminService, coord.address);
  await until(`${name}-n1 ready`, async () => (await admin.listNodes({})).nodes.some((n) => n.nodeId === `${name}-n1` && n.state === NodeState.READY), 60_000);
  const events: Event[] = [];
  const stopWatch = new AbortController();
  void (async () => {
    for await (const r of admin.watchEvents({ types: ["load.waiting", "load.failed"], nodeId: "", model: "" }, { signal: stopWatch.signal })) if (r.event !== undefined) events.push(r.event);
  })().catch(() => undefined);
  return { coord, agent, admin, events, stopWatch, metricsAddress };
}

async function stopCluster(c: Cluster | undefined): Promise<void> {
  c?.stopWatch.abort();
  c?.admin.close();
  await c?.agent.cleanup();
  await c?.coord.kill();
}

function ofModel(c: Cluster, model: string): Event[] {
  return c.events.filter((e) => e.model === model);
}

/** The first load.failed of `model` the watcher saw (events can arrive after the RPC answered). */
async function loadFailed(c: Cluster, model: string, nth = 1): Promise<Event> {
  return until(`load.failed #${String(nth)} of ${model}`, () => ofModel(c, model).filter((e) => e.payload.case === "loadFailed")[nth - 1], 60_000);
}

async function jobOf(c: Cluster, model: string): Promise<LoadJob | undefined> {
  return (await c.admin.listModels({})).replicas.find((r) => r.model === model)?.loadJob;
}

let dir = "";
/** loadWait long: a job stays waiting while the test lists it. */
let slow: Cluster | undefined;
/** loadWait short: a room-blocked load gives up soon. */
let quick: Cluster | undefined;
const T = totalmem();
const mib = (bytes: number): string => `${String(Math.floor(bytes / 2 ** 20))}MiB`;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-load-jobs-"));
  [slow, quick] = await Promise.all([
    startCluster(dir, "slow", "10m", [simModel("m")]),
    startCluster(dir, "quick", "3s", [
      simModel("never", { selector: { gpu: "none-such" } }),
      // Larger than the node's memory: no node could ever hold it.
      simModel("huge", { memoryEstimate: mib(T * 4) }),
      // 30% of the node's memory, pinned: nothing evicts it (it loads while the host uses under 70%).
      // `room` (80%) then fits the node, never the room left beside `big`, whatever the host uses.
      simModel("big", { pinned: true, memoryEstimate: mib(T * 0.3) }),
      simModel("room", { memoryEstimate: mib(T * 0.8) }),
    ]),
  ]);
}, 180_000);

afterAll(async () => {
  await Promise.all([stopCluster(slow), stopCluster(quick)]);
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("load jobs and one answer for 'never' vs 'not now' (real coordinator, agent, backend-sim, CLI)", { timeout: 240_000 }, () => {
  it("a load waiting for a node is a job: load.waiting once, listed by ListModels and `warden models ls` with the reason; once the node is back it loads and the job is gone, no load.failed", async () => {
    const c = slow!;
    await c.admin.drainNode({ nodeId: "slow-n1" });
    const load = c.admin.loadModel({ model: "m" }, { timeoutMs: 180_000 });
    const waiting = await until("load.waiting of m", () => ofModel(c, "m").find((e) => e.payload.case === "loadWaiting"), 60_000);
    expect(waiting.incarnation).toBe("");
    expect(waiting.payload.case === "loadWaiting" ? waiting.payload.value.reason : "").toContain("node is draining");
    const job = await jobOf(c, "m");
    expect(job).toMatchObject({ state: LoadJobState.WAITING, phase: LoadJobPhase.WAITING_FOR_NODE, model: "m" });
    expect(job?.reason).toContain("slow-n1: node is draining");
    expect(job?.incarnation).toBe(waiting.payload.case === "loadWaiting" ? waiting.payload.value.loadIncarnation : "?");
    const metrics = await (await fetch(`http://${c.metricsAddress}/metrics`)).text();
    expect(metrics).toMatch(/^warden_load_jobs\{state="waiting"\} 1$/m);
    const ls = warden(["models", "ls", "--addr", c.coord.address]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^LOAD JOBS$/m);
    expect(ls.stdout).toMatch(/^m: waiting for a node: .*slow-n1: node is draining \(\d/m);

    await c.admin.undrainNode({ nodeId: "slow-n1" });
    expect((await load).instance?.model).toBe("m");
    expect(await jobOf(c, "m")).toBeUndefined();
    // Still one load.waiting, and no load.failed (a later one would follow the load's answer on this stream).
    expect(ofModel(c, "m").map((e) => e.payload.case)).toEqual(["loadWaiting"]);
  });

  it("a load no node can ever take answers at once on gRPC and HTTP: FAILED_PRECONDITION, never waiting, a failed job with the reason", async () => {
    const c = quick!;
    const never = await refusal(c, c.admin.loadModel({ model: "never" }, { timeoutMs: 60_000 }));
    expect(never.code, never.message).toBe(Code.FailedPrecondition);
    expect(never.rawMessage).toContain("selector gpu=none-such does not match");
    const huge = await refusal(c, c.admin.loadModel({ model: "huge" }, { timeoutMs: 60_000 }));
    expect(huge.code, huge.message).toBe(Code.FailedPrecondition);
    expect(huge.rawMessage).toContain("more than the node holds");
    const r = await fetch(`http://${c.coord.httpAddress ?? ""}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "huge", messages: [{ role: "user", content: "hi" }] }),
      signal: AbortSignal.timeout(60_000),
    });
    const body = (await r.json()) as { error: { message: string } };
    // OpenAI's surface answers FAILED_PRECONDITION 503 without Retry-After (retrying will not help); "not now" carries one.
    expect(r.status, JSON.stringify(body)).toBe(503);
    expect(r.headers.get("retry-after")).toBeNull();
    expect(body.error.message).toContain("more than the node holds");

    for (const [model, times] of [["never", 1], ["huge", 2]] as const) {
      const failed = await loadFailed(c, model, times);
      expect(failed.payload.case === "loadFailed" ? failed.payload.value.code : "").toBe("FAILED_PRECONDITION");
      // Never waiting: no load.waiting before its load.failed (one stream, in emit order).
      expect(ofModel(c, model).map((e) => e.payload.case)).toEqual(Array.from({ length: times }, () => "loadFailed"));
    }
    const job = await jobOf(c, "huge");
    expect(job).toMatchObject({ state: LoadJobState.FAILED, code: "FAILED_PRECONDITION", phase: LoadJobPhase.WAITING_FOR_NODE });
    expect(job?.reason).toContain("more than the node holds");
  });

  it("a load blocked by room (the node's budget held by a pinned instance) waits loadWait, then UNAVAILABLE naming it; the failed job is listed with its reason", async () => {
    const c = quick!;
    await c.admin.setNodeLimits({ nodeId: "quick-n1", limits: { memoryBudget: { case: "memoryBudgetBytes", value: BigInt(T) } } });
    expect((await c.admin.loadModel({ model: "big" }, { timeoutMs: 60_000 })).instance?.model).toBe("big");
    const room = await refusal(c, c.admin.loadModel({ model: "room" }, { timeoutMs: 60_000 }));
    expect(room.code, room.message).toBe(Code.Unavailable);
    expect(room.rawMessage).toContain("over its memory budget");
    const failed = await loadFailed(c, "room");
    expect(failed.payload.case === "loadFailed" ? failed.payload.value.code : "").toBe("UNAVAILABLE");
    expect(ofModel(c, "room").map((e) => e.payload.case)).toEqual(["loadWaiting", "loadFailed"]);
    const job = await jobOf(c, "room");
    expect(job).toMatchObject({ state: LoadJobState.FAILED, code: "UNAVAILABLE" });
    expect(job?.reason).toContain("over its memory budget");
    const ls = warden(["models", "ls", "--addr", c.coord.address]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^room: failed: cannot load model "room" now \(waited 3s\): .*over its memory budget.* \(UNAVAILABLE, /m);
    expect(ls.stdout).toMatch(/^huge: failed: .*more than the node holds/m);
  });
});
