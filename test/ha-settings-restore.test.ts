/**
 * The coordinator's HA settings wiring over an in-memory state
 * store (the port's fake: services/coordinator/src/ha/memory-state-store.fixture.ts)
 * and a real coordinator in process, real loopback gRPC, a file journal in
 * place of the JetStream one; nodes are driven through NodeService by the
 * test. The real-cluster version is ha-settings.test.ts.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Code, createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { openFileJournal } from "@warden/journal";
import { AdminService, BackendState, NodeService, NodeState } from "@warden/proto";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";
import { MemoryStateStore } from "../services/coordinator/src/ha/memory-state-store.fixture.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { refusal } from "./support/refusal.js";

const dirs: string[] = [];
const running: { c: Coordinator; admin: Client<typeof AdminService>; node: Client<typeof NodeService> }[] = [];
afterAll(async () => {
  for (const r of running) {
    r.admin.close();
    r.node.close();
    await r.c.close({ stopBackends: false }).catch(() => undefined);
  }
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const bootEpoch = 1_760_000_000_000n;
// Nothing listens on port 1: the coordinator's WatchBackends just fails and retries.
const nowhere = "127.0.0.1:1";

async function start(stateDir: string, store: MemoryStateStore, epoch: bigint): Promise<{ c: Coordinator; admin: Client<typeof AdminService>; node: Client<typeof NodeService> }> {
  const config = resolveCoordinatorConfig({ listen: "127.0.0.1:0", stateDir, embeddedAgent: false, recoveryWindow: "300ms", policy: { tickInterval: "100ms" }, models: [simModel("m"), simModel("n")] });
  const journal = await openFileJournal({ path: join(stateDir, "ha.journal") });
  const c = await startCoordinator(config, { ha: { journal, state: store, leaderEpoch: () => epoch, onSuperseded: () => undefined } });
  const r = { c, admin: createClient(AdminService, c.address), node: createClient(NodeService, c.address) };
  running.push(r);
  return r;
}

async function stop(r: { c: Coordinator; admin: Client<typeof AdminService>; node: Client<typeof NodeService> }): Promise<void> {
  r.admin.close();
  r.node.close();
  await r.c.close({ stopBackends: false });
  running.splice(running.indexOf(r), 1);
}

const inventory = (nodeId: string, sequence: bigint, backends: { incarnation: string; model: string; address: string }[]) => ({
  nodeId,
  bootEpoch,
  sequence,
  orphans: [],
  backends: backends.map((b) => ({ ...b, pid: 4242, state: BackendState.READY, backend: "backend-sim" })),
});

describe("HA settings: written before applied, restored at takeover (in-memory store)", () => {
  it("a change is applied only once acknowledged; no quorum = UNAVAILABLE naming the store and nothing applied; a key changed behind it = ABORTED, stale", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "warden-ha-settings-"));
    dirs.push(stateDir);
    const store = new MemoryStateStore();
    const one = await start(stateDir, store, 1n);
    await one.node.register({ nodeId: "a", address: nowhere, bootEpoch });
    await one.node.heartbeat(inventory("a", 1n, []));

    store.gate();
    const drain = one.admin.drainNode({ nodeId: "a" });
    await until("the drain write to reach the store", () => store.waiting === 1);
    // Held by the store: not applied.
    expect(one.c.nodes.get("a")?.draining).toBe(false);
    store.release();
    expect((await drain).node?.draining).toBe(true);
    expect(store.peek("drain", "a")).toMatchObject({ force: false });

    store.unavailable = true;
    const down = await refusal(one.admin.undrainNode({ nodeId: "a" }));
    expect(down.code).toBe(Code.Unavailable);
    expect(down.message).toContain(store.name);
    expect(one.c.nodes.get("a")?.draining).toBe(true);
    const policyBefore = (await one.admin.getPolicy({})).policy;
    expect((await refusal(one.admin.updatePolicy({ patch: { idleCheck: true, models: [] } }))).code).toBe(Code.Unavailable);
    expect((await one.admin.getPolicy({})).policy).toEqual(policyBefore);
    store.unavailable = false;

    // Another coordinator wrote the key: this one is stale and applies nothing.
    store.foreignPut("drain", "a", { force: true, sinceWallMs: 5 });
    const aborted = await refusal(one.admin.undrainNode({ nodeId: "a" }));
    expect(aborted.code).toBe(Code.Aborted);
    expect(one.c.nodes.get("a")?.draining).toBe(true);
    const later = await refusal(one.admin.scaleModel({ model: "m", max: 2 }));
    expect(later.code).toBe(Code.FailedPrecondition);
    expect((await one.admin.listModels({})).replicas.find((r) => r.model === "m")?.max).toBe(1);
    await stop(one);
  });

  it("at takeover: drain applies at registration, lost nodes are lost, forgotten incarnations are not restored, policy/scale/limits apply", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "warden-ha-settings-"));
    dirs.push(stateDir);
    const store = new MemoryStateStore();
    const newId = createUlidFactory(systemClock, cryptoRng);
    const onB = newId();
    const forgottenOnC = newId();

    // The old leader: b and c report an instance each (journaled); its forget of c's was
    // acknowledged by the store but its journal write did not land (planted below).
    const one = await start(stateDir, store, 1n);
    await one.node.register({ nodeId: "b", address: nowhere, bootEpoch });
    await one.node.heartbeat(inventory("b", 1n, [{ incarnation: onB, model: "m", address: "127.0.0.1:2" }]));
    await one.node.register({ nodeId: "c", address: nowhere, bootEpoch });
    await one.node.heartbeat(inventory("c", 1n, [{ incarnation: forgottenOnC, model: "n", address: "127.0.0.1:3" }]));
    await until("both adopted", () => one.c.loader.knows(onB) && one.c.loader.knows(forgottenOnC));
    await one.admin.setNodeLimits({ nodeId: "b", limits: { maxReplicasPerModel: 3 }, operator: "ops" });
    await one.admin.updatePolicy({ patch: { idleCheck: true, idleTimeoutMs: 120_000n, models: [{ model: "n", pinned: true, groups: ["g"] }] } });
    await one.admin.scaleModel({ model: "m", min: 0, max: 3, operator: "ops" });
    await stop(one);
    store.foreignPut("lost-node", "b", { reason: "rack fire", atWallMs: Date.now() });
    store.foreignPut("forgotten", forgottenOnC, { nodeId: "c", operator: "ops", note: "gone", atWallMs: Date.now() });
    store.foreignPut("drain", "a", { force: false, sinceWallMs: Date.now() });
    // Too old: dropped at takeover, not applied.
    store.foreignPut("forgotten", "old-one", { nodeId: "b", operator: "ops", note: "", atWallMs: Date.now() - 25 * 3_600_000 });

    const two = await start(stateDir, store, 2n);
    // b has not registered: lost, and the journal's replicas there do not count; the forgotten one on c (not
    // registered either) does not count at all: no journal replica at all.
    const listed = (await two.admin.listNodes({})).nodes;
    // a, drained in the store and not registered since, is listed as not reported since the restart.
    expect(listed.map((n) => [n.nodeId, n.state, n.draining])).toEqual([
      ["a", NodeState.NOT_REPORTED, true],
      ["b", NodeState.LOST, false],
    ]);
    expect(two.c.loader.journalReplicas.list()).toEqual([]);
    expect(two.c.loader.knows(onB)).toBe(false);
    expect(two.c.loader.knows(forgottenOnC)).toBe(false);
    expect((await two.admin.declareNodeLost({ nodeId: "b", reason: "again" })).wasAlreadyLost).toBe(true);
    // Policy, scale and limits as the old leader left them.
    const policy = (await two.admin.getPolicy({})).policy;
    expect(policy?.idleCheck).toBe(true);
    expect(policy?.idleTimeoutMs).toBe(120_000n);
    expect(policy?.models.find((m) => m.model === "n")).toMatchObject({ pinned: true, groups: ["g"] });
    expect((await two.admin.listModels({})).replicas.find((r) => r.model === "m")?.max).toBe(3);
    expect(two.c.nodes.limitsOverride("b")).toEqual({ maxReplicasPerModel: 3 });
    await until("the old forgotten entry dropped", () => store.peek("forgotten", "old-one") === undefined);

    // a registers: drained from the first moment.
    await two.node.register({ nodeId: "a", address: nowhere, bootEpoch });
    expect(two.c.nodes.get("a")?.draining).toBe(true);
    // Its first inventory reconciled: the drain's work resumes (the instance there is being stopped, reason drain).
    const onA = newId();
    await two.node.heartbeat(inventory("a", 1n, [{ incarnation: onA, model: "n", address: "127.0.0.1:4" }]));
    await until("the drain resumed on a", () => two.c.loader.isBeingStopped(onA));
    // b comes back: no longer lost (its entry removed); its live instance adopted.
    await two.node.register({ nodeId: "b", address: nowhere, bootEpoch });
    await two.node.heartbeat(inventory("b", 1n, [{ incarnation: onB, model: "m", address: "127.0.0.1:2" }]));
    expect(two.c.nodes.get("b")?.state).toBe("ready");
    expect(two.c.loader.knows(onB)).toBe(true);
    await until("b's lost entry removed", () => store.peek("lost-node", "b") === undefined);
    await stop(two);
  });
});
