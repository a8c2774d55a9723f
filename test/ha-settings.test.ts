/**
 * HA settings: an HA coordinator writes every
 * operator change to the replicated state store before it applies it, and a
 * new leader loads them at takeover. Real processes: a 3-server nats-server
 * JetStream cluster, the real KV store and JetStream journal, a coordinator in
 * this process with `ha` wiring, agent child processes with real
 * backend-sim processes. The first coordinator drains a node, declares
 * another lost, forgets an instance, changes the policy, scales a model and
 * sets a node's limits; it closes (the backends keep running) and a second
 * one on the same store and stream (epoch 2) shows all six, with the
 * backends adopted (same pids). Without quorum a DrainNode answers
 * UNAVAILABLE and the node is not draining.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAudit } from "@warden/audit";
import { Code } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InstanceState, NodeState } from "@warden/proto";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import { openJetStreamJournal, type JetStreamJournal } from "../services/coordinator/src/ha/jetstream-journal.js";
import { openKvStateStore } from "../services/coordinator/src/ha/kv-state-store.js";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { startNatsCluster, type NatsClusterHandle } from "./support/nats-cluster.js";
import { refusal } from "./support/refusal.js";

const tag = uniqueTag("ha-settings");
let cluster: NatsClusterHandle;
let stateDir: string;
const conns: NatsConnection[] = [];
const agents: RemoteAgent[] = [];

interface Leader {
  readonly c: Coordinator;
  readonly admin: Client<typeof AdminService>;
  readonly journal: JetStreamJournal;
}
let leader: Leader | undefined;

beforeAll(async () => {
  cluster = await startNatsCluster();
  stateDir = await mkdtemp(join(tmpdir(), "warden-ha-settings-"));
});
afterAll(async () => {
  await closeLeader();
  for (const a of agents) await a.cleanup();
  expect(await liveRemoteAgents()).toEqual([]);
  for (const nc of conns) await nc.close().catch(() => undefined);
  await cluster.stop();
  await rm(stateDir, { recursive: true, force: true });
  expect(await liveTaggedSims(tag)).toEqual([]);
});

/** A coordinator term: its own NATS connection, journal and store client, as the HA runner gives it. */
async function lead(listen: string, epoch: bigint): Promise<Leader> {
  const nc = await connectAudit({ servers: [...cluster.urls], reconnectTimeWaitMs: 100 });
  conns.push(nc);
  const journal = await openJetStreamJournal(nc, { stream: "SETTINGS_JOURNAL", subject: "settings.journal" });
  const state = await openKvStateStore(nc, { bucket: "settings-state" });
  const config = resolveCoordinatorConfig({
    listen,
    stateDir,
    embeddedAgent: false,
    nodeGrace: "2s",
    recoveryWindow: "1s",
    policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms" },
    stop: { timeout: "10s", rpcTimeout: "8s" },
    models: [simModel("m"), simModel("n")],
  });
  const c = await startCoordinator(config, { ha: { journal, state, leaderEpoch: () => epoch, onSuperseded: () => undefined } });
  return { c, admin: createClient(AdminService, c.address), journal };
}

async function closeLeader(): Promise<void> {
  const l = leader;
  leader = undefined;
  if (l === undefined) return;
  l.admin.close();
  // No embedded agent: the backends belong to the agents and keep running.
  await l.c.close({ stopBackends: false });
  l.journal.close();
}

const nodeOf = async (admin: Client<typeof AdminService>, nodeId: string) => (await admin.listNodes({})).nodes.find((n) => n.nodeId === nodeId);

describe("HA settings on the replicated state store (3 nats-servers, agent processes)", () => {
  it("drain, lost node, forgotten instance, policy, scale and node limits survive a change of leader; the backends are adopted with the same pids", async () => {
    const first = await lead("127.0.0.1:0", 1n);
    leader = first;
    const address = first.c.address;
    for (const id of ["node-a", "node-b", "node-c"]) agents.push(await startRemoteAgent({ coordinator: address, nodeId: id, tag }));
    const [a, b, c] = agents as [RemoteAgent, RemoteAgent, RemoteAgent];
    await until("three nodes ready", async () => (await first.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 3, 60_000);

    const onC = (await first.admin.loadModel({ model: "m", nodeId: "node-c" })).instance!;
    const onB = (await first.admin.loadModel({ model: "n", nodeId: "node-b" })).instance!;
    const pidsOnC = await c.liveBackends();
    expect(pidsOnC).toHaveLength(1);

    expect((await first.admin.drainNode({ nodeId: "node-a" })).node?.draining).toBe(true);
    b.pause();
    await until("node-b unreachable", async () => (await nodeOf(first.admin, "node-b"))?.state === NodeState.UNREACHABLE, 60_000);
    expect((await first.admin.declareNodeLost({ nodeId: "node-b", reason: "rack fire" })).wasAlreadyLost).toBe(false);
    await first.admin.forgetInstance({ nodeId: "node-b", incarnation: onB.incarnation, operator: "ops", note: "node-b is gone for good" });
    await first.admin.updatePolicy({ patch: { idleCheck: true, idleTimeoutMs: 3_600_000n, models: [{ model: "n", pinned: true, groups: ["big"] }] } });
    await first.admin.scaleModel({ model: "m", min: 0, max: 2, operator: "ops" });
    await first.admin.setNodeLimits({ nodeId: "node-c", limits: { maxReplicasPerModel: 2 }, operator: "ops" });
    const policyBefore = (await first.admin.getPolicy({})).policy;
    await closeLeader();

    // The new leader: same store and stream, the next epoch, on the address the agents dial.
    const second = await lead(address, 2n);
    leader = second;
    // Before any node registered again: b is lost, the policy and the scale are the old leader's.
    expect((await nodeOf(second.admin, "node-b"))?.state).toBe(NodeState.LOST);
    expect((await second.admin.getPolicy({})).policy).toEqual(policyBefore);
    expect((await second.admin.listModels({})).replicas.find((r) => r.model === "m")).toMatchObject({ min: 0, max: 2 });

    await until("node-a and node-c registered again with the new leader", async () => (await second.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
    const nodes = (await second.admin.listNodes({})).nodes;
    expect(nodes.find((n) => n.nodeId === "node-a")?.draining).toBe(true);
    expect(nodes.find((n) => n.nodeId === "node-b")?.state).toBe(NodeState.LOST);
    const nodeC = nodes.find((n) => n.nodeId === "node-c");
    expect(nodeC?.draining).toBe(false);
    expect(nodeC?.limitsOverride?.maxReplicasPerModel).toBe(2);
    expect(nodeC?.effectiveLimits?.maxReplicasPerModel).toBe(2);

    // c's backend adopted, not restarted; the forgotten incarnation is nowhere.
    const adopted = await until("m on node-c adopted", async () => (await second.admin.listModels({})).instances.find((i) => i.incarnation === onC.incarnation && i.state === InstanceState.READY));
    expect(adopted.nodeId).toBe("node-c");
    expect(await c.liveBackends()).toEqual(pidsOnC);
    const models = await second.admin.listModels({});
    expect(models.instances.map((i) => i.incarnation)).not.toContain(onB.incarnation);
    expect(second.c.loader.journalReplicas.list().map((u) => u.incarnation)).not.toContain(onB.incarnation);
    expect(models.replicas.find((r) => r.model === "m")).toMatchObject({ min: 0, max: 2 });
    expect(a.pid).toBeGreaterThan(0);
  });

  it("without quorum a DrainNode answers UNAVAILABLE naming the store, and the node is not draining", async () => {
    const l = leader;
    if (l === undefined) throw new Error("the first test left no leader");
    expect((await nodeOf(l.admin, "node-c"))?.draining).toBe(false);
    await cluster.kill(1);
    await cluster.kill(2);
    const err = await refusal(l.admin.drainNode({ nodeId: "node-c" }));
    expect(err.code).toBe(Code.Unavailable);
    expect(err.message).toContain("settings-state");
    expect((await nodeOf(l.admin, "node-c"))?.draining).toBe(false);
    expect(l.c.nodes.get("node-c")?.draining).toBe(false);
    await cluster.restart(1);
    await cluster.restart(2);
  });
});
