/**
 * A coordinator killed with SIGKILL and started again on the same state dir
 * and address, over real agent processes and real backend-sim processes:
 * every open stop intent of the journal is a leftover from the first moment
 * (listed, answered by UnloadModel, accounted) even while its node has not
 * registered, and is reaped when the node returns; every adoption after the
 * restart is audited with an `instance.adopted` event naming how it was found.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InstanceState, NodeState, UnloadOutcome } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess, type LoggedEvent } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { accountingProblems, observe, runningBackends, typesOf, untilAuditComplete, untilConverged, watchAccounting, endWatches } from "./support/chaos-checks.js";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";

const fileTag = uniqueTag("coord-restart");
let coordinators: CoordinatorProcess[] = [];
let agents: RemoteAgent[] = [];
let clients: Client<typeof AdminService>[] = [];
let dirs: string[] = [];
let natsServers: NatsServerHandle[] = [];

afterEach(async () => {
  endWatches();
  for (const c of clients) c.close();
  clients = [];
  for (const a of agents) await a.cleanup();
  agents = [];
  for (const c of coordinators) await c.kill();
  coordinators = [];
  for (const d of dirs) await rm(d, { recursive: true, force: true });
  dirs = [];
  for (const n of natsServers) await n.dispose();
  natsServers = [];
});

afterAll(async () => {
  expect(await liveTaggedSims(fileTag)).toEqual([]);
  expect(await liveRemoteAgents()).toEqual([]);
});

interface Setup {
  readonly dir: string;
  readonly address: string;
  start(): Promise<{ coord: CoordinatorProcess; admin: Client<typeof AdminService> }>;
}

async function setup(models: Record<string, unknown>[], extra: Record<string, unknown> = {}): Promise<Setup> {
  const dir = await mkdtemp(join(tmpdir(), "warden-coord-restart-"));
  dirs.push(dir);
  const address = `127.0.0.1:${String(await freePort())}`;
  const config = {
    listen: address,
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms" },
    stop: { timeout: "10s", rpcTimeout: "1s" },
    recoveryWindow: "500ms",
    // A frozen agent stays "ready" meanwhile: what the test sees is the leftover, not an unreachable node.
    nodeGrace: "120s",
    models,
    ...extra,
  };
  let n = 0;
  return {
    dir,
    address,
    async start() {
      const coord = await startCoordinatorProcess(join(dir, `coordinator-${String(n++)}.yaml`), config);
      coordinators.push(coord);
      const admin = createClient(AdminService, coord.address);
      clients.push(admin);
      return { coord, admin };
    },
  };
}

const adopted = (inc: string) => (e: LoggedEvent): boolean => e.incarnation === inc;
const payload = (e: LoggedEvent): unknown => e["instanceAdopted"];

describe("coordinator restart (coordinator, agent and backend processes)", { timeout: 180_000 }, () => {
  it("leftovers on a node still partitioned survive kill -9 of the coordinator: listed, unloadable as LEFTOVER, audited, and reaped when the node returns; a healthy node's instance is adopted, not lost; converged, audit complete across the crash", async () => {
    const nats = await startNatsServer();
    natsServers.push(nats);
    const onB = { selector: { node: "b" }, memoryEstimate: "1GiB" };
    const onA = { selector: { node: "a" }, memoryEstimate: "1GiB" };
    const s = await setup([simModel("m", onB), simModel("m2", onB), simModel("keep", onA), simModel("gone", onA)], { nats: { url: nats.url } });
    const first = await s.start();
    const a = await startRemoteAgent({ coordinator: s.address, nodeId: "a", tag: fileTag });
    const b = await startRemoteAgent({ coordinator: s.address, nodeId: "b", tag: fileTag });
    agents.push(a, b);
    await until("a and b ready", async () => (await first.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
    const load = async (model: string): Promise<string> => (await first.admin.loadModel({ model }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const [inc = "", inc2 = "", keep = "", gone = ""] = await Promise.all(["m", "m2", "keep", "gone"].map(load));
    for (const i of [inc, inc2, keep, gone]) expect(i).not.toBe("");
    const [keepPid] = (await runningBackends(fileTag)).filter((r) => r.incarnation === keep).map((r) => r.pid);
    // An eviction that completes before the crash: its events must still reach the stream.
    expect((await first.admin.unloadModel({ model: "gone" })).outcome).toBe(UnloadOutcome.STOPPED);
    // b is partitioned: StopBackend times out → leftovers, their stop intents journaled.
    b.pause();
    const unloads = await Promise.all(["m", "m2"].map(async (model) => (await first.admin.unloadModel({ model })).outcome));
    expect(unloads).toEqual([UnloadOutcome.LEFTOVER, UnloadOutcome.LEFTOVER]);
    await first.coord.kill();

    const second = await s.start();
    // The partitioned node's leftovers are accounted from the coordinator's first answer on (from the journal).
    const watch = watchAccounting(() => second.admin, fileTag, "b");
    const logged = (): LoggedEvent[] => [...first.coord.events, ...second.coord.events];
    // b has not registered with this coordinator (it is still frozen): listed as known from before the restart.
    expect((await second.admin.listNodes({})).nodes.filter((n) => n.nodeId === "b").map((n) => [n.state, n.instanceCount])).toEqual([[NodeState.NOT_REPORTED, 2]]);
    const onNodeB = async (): Promise<unknown[]> =>
      (await second.admin.listModels({})).instances.filter((i) => i.nodeId === "b").map((i) => [i.model, i.incarnation, i.nodeId, i.state, i.nodeState]).sort();
    expect(await onNodeB()).toEqual([
      ["m", inc, "b", InstanceState.LEFTOVER, NodeState.NOT_REPORTED],
      ["m2", inc2, "b", InstanceState.LEFTOVER, NodeState.NOT_REPORTED],
    ]);
    // UNAVAILABLE is transient by contract (the healthy node a re-registered but has not reported its
    // inventory yet, so "is m loaded anywhere?" has no answer): the caller retries.
    const u = await until("m unloaded as a leftover", async () =>
      await second.admin.unloadModel({ model: "m" }).catch((err: unknown) => {
        if (isWardenError(err, Code.Unavailable)) return undefined;
        throw err;
      }), 60_000);
    expect(u.outcome).toBe(UnloadOutcome.LEFTOVER);
    const audit = await second.coord.waitForEvent("instance.adopted", adopted(inc));
    expect(payload(audit)).toEqual({ asLeftover: true, foundBy: "journal" });
    expect(audit.nodeId).toBe("b");
    expect(await b.liveBackends()).toHaveLength(2);
    // The healthy node registers and its instance is adopted; meanwhile everything that runs stays accounted.
    await until("keep adopted", async () => (await second.admin.listModels({})).instances.some((i) => i.incarnation === keep && i.state === InstanceState.READY), 60_000);
    expect(accountingProblems(await observe(second.admin, fileTag))).toEqual([]);

    // b returns: registers with the new coordinator; the leftovers are reaped (stopped by the
    // old coordinator's StopBackend still in b's socket, or by the retry) and their intents closed.
    b.resume();
    for (const i of [inc, inc2]) await second.coord.waitForEvent("leftover.reaped", (e) => e.incarnation === i, 60_000);
    await until("b's backends gone", async () => (await b.liveBackends()).length === 0, 60_000);
    const end = await untilConverged(second.admin, fileTag, ["a", "b"]);
    const sampled = await watch.stop();
    expect(sampled.problems).toEqual([]);
    expect(sampled.samples).toBeGreaterThan(0);
    expect(end.rows.map((r) => [r.model, r.incarnation])).toEqual([["keep", keep]]);
    expect(end.running.map((r) => r.pid)).toEqual([keepPid]);
    // b may be converged (registered, its leftovers stopped by the retry on register) before its
    // first heartbeat: until that inventory arrives "not loaded" cannot be known, and the answer
    // is UNAVAILABLE by design. Only that answer is waited out.
    await until("m known not loaded", async () => {
      const r = await second.admin.unloadModel({ model: "m" }).then(
        (x) => x.outcome,
        (e: unknown) => {
          if (e instanceof Error && e.message.includes(`node "b" has not reported an inventory yet`)) return undefined;
          throw e;
        },
      );
      if (r !== undefined) expect(r).toBe(UnloadOutcome.NOT_LOADED);
      return r !== undefined;
    });
    // Never adopted as routable in between.
    expect(second.coord.events.filter((e) => e.type === "instance.adopted" && e.incarnation === inc).map(payload)).toEqual([{ asLeftover: true, foundBy: "journal" }]);
    // The audit trail spans the crash: everything either coordinator logged is on the stream, in order per instance.
    const stream = await untilAuditComplete(nats.url, logged);
    // (Stopped, unless the kill beat the journaling of eviction.stopped: then closed by the restart and reaped as already gone.)
    expect([["backend.loaded", "eviction.started", "eviction.stopped"], ["backend.loaded", "eviction.started", "recovered", "eviction.failed", "instance.adopted", "leftover.reaped"]]).toContainEqual(
      typesOf(stream.events, gone).filter((t) => t !== "eviction.retried"),
    );
    // The unload answers LEFTOVER before its eviction.failed is journaled: when the kill lands in
    // between, the restarted coordinator closes the unsettled eviction itself (failed after recovered).
    const closedBefore = ["backend.loaded", "eviction.started", "eviction.failed", "recovered", "instance.adopted", "leftover.reaped"];
    const closedAfter = ["backend.loaded", "eviction.started", "recovered", "eviction.failed", "instance.adopted", "leftover.reaped"];
    for (const i of [inc, inc2]) expect([closedBefore, closedAfter]).toContainEqual(typesOf(stream.events, i).filter((t) => t !== "eviction.retried"));
  });

  it("re-adoption of a running instance after kill -9 of the coordinator publishes instance.adopted (remote-only, found by inventory) exactly once", async () => {
    const s = await setup([simModel("m")]);
    const first = await s.start();
    const a = await startRemoteAgent({ coordinator: s.address, nodeId: "a", tag: fileTag });
    agents.push(a);
    await until("a ready", async () => (await first.admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY));
    const inc = (await first.admin.loadModel({ model: "m" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    await first.coord.kill();

    const second = await s.start();
    const audit = await second.coord.waitForEvent("instance.adopted", adopted(inc), 60_000);
    expect(payload(audit)).toEqual({ foundBy: "inventory" }); // as_leftover false: omitted in proto JSON
    expect([audit.nodeId, audit.model]).toEqual(["a", "m"]);
    const rows = (await second.admin.listModels({})).instances.map((i) => [i.incarnation, i.state]);
    expect(rows).toEqual([[inc, InstanceState.READY]]);
    // The adopted instance is stopped when asked, and is not adopted a second time by a later heartbeat.
    expect((await second.admin.unloadModel({ model: "m" })).outcome).toBe(UnloadOutcome.STOPPED);
    await until("a's backend gone", async () => (await a.liveBackends()).length === 0);
    expect(second.coord.events.filter((e) => e.type === "instance.adopted")).toHaveLength(1);
  });
});
