/**
 * Replicas across restarts, over real processes: a coordinator
 * process (killed with SIGKILL and started again on the same state dir and
 * address), agent processes (SIGKILL, then started again on the same state
 * dir) and their backend-sim processes. Every replica is re-adopted — the
 * same incarnations, the same backend processes, routable again, with no
 * replacement load and no stop.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService, InstanceState, NodeState } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { runningBackends } from "./support/chaos-checks.js";
import { until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess, type LoggedEvent } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { holdCalls, instancesOf, readyOf, replicaModel, summaryOf, type HeldCalls } from "./support/replica-calls.js";

const tag = uniqueTag("replicas-restart");
let coordinators: CoordinatorProcess[] = [];
let agents: RemoteAgent[] = [];
let closers: (() => void)[] = [];
let held: HeldCalls[] = [];
let dirs: string[] = [];

afterEach(async () => {
  for (const h of held) await h.release().catch(() => undefined);
  held = [];
  for (const c of closers) c();
  closers = [];
  for (const a of agents) await a.cleanup();
  agents = [];
  for (const c of coordinators) await c.kill();
  coordinators = [];
  for (const d of dirs) await rm(d, { recursive: true, force: true });
  dirs = [];
  expect(await liveRemoteAgents()).toEqual([]);
});

afterAll(async () => {
  expect(await liveTaggedSims(tag)).toEqual([]);
});

interface Running {
  readonly coord: CoordinatorProcess;
  readonly admin: Client<typeof AdminService>;
  readonly inference: Client<typeof InferenceService>;
}

/** A coordinator config on a fixed address and state dir; `start` launches a process of it (models may change between starts). */
async function setup(): Promise<{ address: string; start(models: Record<string, unknown>[]): Promise<Running> }> {
  const dir = await mkdtemp(join(tmpdir(), "warden-replicas-restart-"));
  dirs.push(dir);
  const address = `127.0.0.1:${String(await freePort())}`;
  let n = 0;
  return {
    address,
    async start(models) {
      const config = {
        listen: address,
        stateDir: join(dir, "state"),
        embeddedAgent: false,
        policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms" },
        stop: { timeout: "10s", rpcTimeout: "2s" },
        // An agent killed and restarted may be unreachable for a while; it is not declared lost meanwhile.
        nodeLostAfter: "10m",
        models,
      };
      const coord = await startCoordinatorProcess(join(dir, `coordinator-${String(n++)}.yaml`), config);
      coordinators.push(coord);
      const admin = createClient(AdminService, coord.address);
      const inference = createClient(InferenceService, coord.address);
      closers.push(() => {
        admin.close();
        inference.close();
      });
      return { coord, admin, inference };
    },
  };
}

async function nodesReady(admin: Client<typeof AdminService>, ids: readonly string[]): Promise<void> {
  await until(`${ids.join(", ")} ready`, async () => (await admin.listNodes({})).nodes.filter((n) => ids.includes(n.nodeId) && n.state === NodeState.READY).length === ids.length, 60_000);
}

/** Scales `model` to `n` replicas live and waits until all are ready; their incarnations, by node. */
async function scaleTo(r: Running, model: string, n: number): Promise<{ nodeId: string; incarnation: string }[]> {
  await r.admin.scaleModel({ model, min: n, operator: "test" });
  const rows = await until(`${String(n)} ready replicas`, async () => {
    const x = await readyOf(r.admin, model);
    return x.length === n ? x : undefined;
  }, 90_000);
  return rows.map((i) => ({ nodeId: i.nodeId, incarnation: i.incarnation }));
}

/** Backend processes really running, as [node, incarnation, pid], sorted. */
async function processes(): Promise<[string, string, number][]> {
  return (await runningBackends(tag)).map((b): [string, string, number] => [b.nodeId, b.incarnation, b.pid]).sort((x, y) => x[1].localeCompare(y[1]));
}

const stopEvents = (events: readonly LoggedEvent[], incs: readonly string[]): string[] =>
  events.filter((e) => incs.includes(e.incarnation ?? "") && (e.type.startsWith("eviction.") || e.type.startsWith("leftover."))).map((e) => `${e.type} ${e.incarnation ?? ""}`);

/** Two held calls split one per replica: both are routable. */
async function bothServe(r: Running, model: string, incs: readonly string[]): Promise<void> {
  const h = await holdCalls(r.inference, r.admin, model, 2);
  held.push(h);
  expect((await instancesOf(r.admin, model)).map((i) => [i.incarnation, i.inFlight]).sort()).toEqual(incs.map((i) => [i, 1]).sort());
  await h.release();
  held = held.filter((x) => x !== h);
}

describe("replicas across restarts (coordinator, agent and backend processes)", { timeout: 240_000 }, () => {
  it("kill -9 of an agent holding two replicas of one model (spread any, maxReplicasPerModel 2), restarted on its state dir: both are adopted — same incarnations, same processes, routable — with no replacement load and no stop", async () => {
    const s = await setup();
    const model = replicaModel("m", { min: 0, max: 2, targetInFlight: 1 }, { spread: "any" });
    const r = await s.start([model]);
    const a = await startRemoteAgent({ coordinator: s.address, nodeId: "a", tag, config: { maxReplicasPerModel: 2 } });
    agents.push(a);
    await nodesReady(r.admin, ["a"]);
    const reps = await scaleTo(r, "m", 2);
    expect(reps.map((x) => x.nodeId)).toEqual(["a", "a"]);
    const incs = reps.map((x) => x.incarnation).sort();
    const before = await processes();
    expect(before.map(([n, i]) => [n, i])).toEqual(incs.map((i) => ["a", i]));
    const epoch = (await r.admin.getNode({ nodeId: "a" })).node?.bootEpoch;
    const scaledUp = r.coord.events.filter((e) => e.type === "replica.scaled-up").length;

    await a.kill();
    await a.restart();
    await until("a registered again (new boot epoch) with both replicas ready", async () => {
      const n = (await r.admin.getNode({ nodeId: "a" })).node;
      const rows = await instancesOf(r.admin, "m");
      return n?.bootEpoch !== epoch && n?.state === NodeState.READY && rows.length === 2 && rows.every((i) => i.state === InstanceState.READY && i.nodeState === NodeState.READY);
    }, 90_000);
    expect((await instancesOf(r.admin, "m")).map((i) => i.incarnation).sort()).toEqual(incs);
    expect(await processes()).toEqual(before);
    await bothServe(r, "m", incs);
    expect(r.coord.events.filter((e) => e.type === "replica.scaled-up").length).toBe(scaledUp);
    expect(stopEvents(r.coord.events, incs)).toEqual([]);
    expect(await processes()).toEqual(before);
    const sum = await summaryOf(r.admin, "m");
    expect([sum.ready, sum.loading, sum.stopping, sum.leftovers]).toEqual([2, 0, 0, 0]);
  });

  it("kill -9 of the coordinator with two replicas on two nodes: the new one (min 2 in its config) adopts both from the inventories — instance.adopted each, no replica load of its own, no stop — and routes to both", async () => {
    const s = await setup();
    const first = await s.start([replicaModel("m", { min: 0, max: 2, targetInFlight: 1 }, { spread: "node" })]);
    for (const nodeId of ["a", "b"]) agents.push(await startRemoteAgent({ coordinator: s.address, nodeId, tag, config: { maxReplicasPerModel: 2 } }));
    await nodesReady(first.admin, ["a", "b"]);
    const reps = await scaleTo(first, "m", 2);
    expect(reps.map((x) => x.nodeId)).toEqual(["a", "b"]);
    const incs = reps.map((x) => x.incarnation).sort();
    const before = await processes();
    expect(before.map(([, i]) => i)).toEqual(incs);
    await first.coord.kill();

    // The operator's scale is in the new config: the reconciler wants 2 from its first tick.
    const second = await s.start([replicaModel("m", { min: 2, max: 2, targetInFlight: 1 }, { spread: "node" })]);
    for (const inc of incs) {
      const ev = await second.coord.waitForEvent("instance.adopted", (e) => e.incarnation === inc, 90_000);
      expect(ev["instanceAdopted"]).toEqual({ foundBy: "inventory" });
    }
    const rows = await until("both ready", async () => {
      const x = await readyOf(second.admin, "m");
      return x.length === 2 ? x : undefined;
    }, 60_000);
    expect(rows.map((i) => [i.nodeId, i.incarnation])).toEqual(reps.map((x) => [x.nodeId, x.incarnation]));
    await bothServe(second, "m", incs);
    expect(second.coord.events.filter((e) => e.type === "replica.scaled-up")).toEqual([]);
    expect(stopEvents(second.coord.events, incs)).toEqual([]);
    expect(await processes()).toEqual(before);
    const sum = await summaryOf(second.admin, "m");
    expect([sum.min, sum.ready, sum.loading, sum.stopping, sum.leftovers, sum.blocked]).toEqual([2, 2, 0, 0, 0, undefined]);
  });
});
