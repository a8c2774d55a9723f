/**
 * A restarted coordinator (the file journal: the same start path as an HA
 * takeover) over a real agent process and real backend-sim processes:
 *
 * - an instance its journal says runs on a node that has not reported yet
 *   counts there for the node's exclusive group: the other member of the
 *   group is not started on that node until the node has reported and the
 *   first member was stopped — checked against the real process table, not
 *   the coordinator's word;
 * - the recovery window ends when the journal's nodes have reported, not on
 *   a fixed timer: with a 10-minute window a load runs as soon as they have.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { wardenVersion } from "@warden/common";
import { AdminService, InstanceState, NodeService, NodeState } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { runningBackends } from "./support/chaos-checks.js";

const fileTag = uniqueTag("placement-restart");
let coordinators: CoordinatorProcess[] = [];
let agents: RemoteAgent[] = [];
let clients: { close(): void }[] = [];
let dirs: string[] = [];

afterEach(async () => {
  for (const c of clients) c.close();
  clients = [];
  for (const a of agents) await a.cleanup();
  agents = [];
  for (const c of coordinators) await c.kill();
  coordinators = [];
  for (const d of dirs) await rm(d, { recursive: true, force: true });
  dirs = [];
});

afterAll(async () => {
  expect(await liveTaggedSims(fileTag)).toEqual([]);
  expect(await liveRemoteAgents()).toEqual([]);
});

async function setup(models: Record<string, unknown>[], recoveryWindow: string): Promise<{ address: string; start(window?: string): Promise<{ coord: CoordinatorProcess; admin: Client<typeof AdminService> }> }> {
  const dir = await mkdtemp(join(tmpdir(), "warden-placement-restart-"));
  dirs.push(dir);
  const address = `127.0.0.1:${String(await freePort())}`;
  const config = {
    listen: address,
    stateDir: join(dir, "state"),
    embeddedAgent: false,
    policy: { tickInterval: "100ms", enforcementRetries: 240, enforcementRetryInterval: "250ms" },
    loadWait: "60s",
    stop: { timeout: "10s", rpcTimeout: "2s" },
    recoveryWindow,
    // A frozen agent stays "ready" meanwhile: nothing is declared lost during the test.
    nodeGrace: "120s",
    models,
  };
  let n = 0;
  return {
    address,
    async start(window = recoveryWindow) {
      const coord = await startCoordinatorProcess(join(dir, `coordinator-${String(n++)}.yaml`), { ...config, recoveryWindow: window });
      coordinators.push(coord);
      const admin = createClient(AdminService, coord.address);
      clients.push(admin);
      return { coord, admin };
    },
  };
}

/** Samples the real process table until stopped: the most backend processes of `nodeId` seen alive at once, and when. */
function sampleNode(nodeId: string): { stop(): Promise<{ max: number; worst: string[]; samples: number }> } {
  const done = new AbortController();
  let max = 0;
  let worst: string[] = [];
  let samples = 0;
  const loop = (async () => {
    while (!done.signal.aborted) {
      const on = (await runningBackends(fileTag)).filter((b) => b.nodeId === nodeId);
      samples++;
      if (on.length > max) {
        max = on.length;
        worst = on.map((b) => `${b.incarnation} (pid ${String(b.pid)})`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    async stop() {
      done.abort();
      await loop;
      return { max, worst, samples };
    },
  };
}

describe("placement rules across a coordinator restart (coordinator, agent and backend processes)", { timeout: 240_000 }, () => {
  it("the other member of an exclusive group never runs beside a journaled one on a node that has not reported: it waits, and starts once the node reported and the first was stopped", async () => {
    const onA = { selector: { node: "a" }, groups: ["gpu0"] };
    const s = await setup([simModel("m1", onA), simModel("m2", onA)], "1s");
    const first = await s.start();
    const a = await startRemoteAgent({ coordinator: s.address, nodeId: "a", tag: fileTag });
    agents.push(a);
    await until("a ready", async () => (await first.admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY));
    const m1 = (await first.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(m1).not.toBe("");
    const node = (await first.admin.listNodes({})).nodes.find((n) => n.nodeId === "a");
    if (node === undefined) throw new Error("node a not listed");
    expect((await runningBackends(fileTag)).map((b) => b.incarnation)).toEqual([m1]);

    // The agent is kept from reporting across the restart.
    a.pause();
    await first.coord.kill();
    const second = await s.start();
    const sampler = sampleNode("a");
    try {
      // The moment between an agent's Register and its first inventory, made to last: the frozen
      // agent's Register is sent for it (its own id, address and boot), so the node is registered
      // while its inventory is not in: listed NOT_REPORTED, and nothing is placed on it. An agent
      // that re-registers after a takeover is there for a heartbeat interval or more, many agents
      // at once on a loaded machine.
      const nodeClient = createClient(NodeService, s.address);
      clients.push(nodeClient);
      await nodeClient.register({ nodeId: "a", address: node.address, labels: node.labels, gpus: [], bootEpoch: node.bootEpoch, version: wardenVersion, backends: node.backends }, { timeoutMs: 10_000 });
      expect((await second.admin.listNodes({})).nodes.map((n) => [n.nodeId, n.state])).toEqual([["a", NodeState.NOT_REPORTED]]);
      const load = second.admin.loadModel({ model: "m2" }, { timeoutMs: 120_000 }).then(
        (r) => ({ ok: true as const, incarnation: r.instance?.incarnation ?? "" }),
        (e: unknown) => ({ ok: false as const, error: String(e) }),
      );
      // Past the 1 s window (it ended on its deadline: the node has not reported), and then some:
      // under a fixed-timer window with nothing unconfirmed counted, m2 was started on a by now.
      await until("recovery window over", () => second.coord.logLines.some((l) => l["msg"] === "recovery window over"), 60_000);
      expect(second.coord.logLines.find((l) => l["msg"] === "recovery window over")).toMatchObject({ cause: "deadline", notReported: ["a"], unconfirmedReplicas: 1 });
      await new Promise((r) => setTimeout(r, 2_000));
      // m2 is still waiting: only m1's process runs on a.
      expect((await runningBackends(fileTag)).map((b) => b.incarnation)).toEqual([m1]);
      a.resume();
      const r = await load;
      if (!r.ok) throw new Error(`m2 did not load: ${r.error}`);
      const seen = await sampler.stop();
      expect(seen.samples).toBeGreaterThan(0);
      // Never two members of the group on a at once, by the process table.
      expect(seen.worst.length <= 1 ? [] : seen.worst).toEqual([]);
      // m1 was adopted from a's inventory, then evicted for m2; only m2 runs.
      await until("only m2 runs", async () => {
        const running = (await runningBackends(fileTag)).map((b) => b.incarnation);
        return running.length === 1 && running[0] === r.incarnation;
      }, 60_000);
      const rows = (await second.admin.listModels({})).instances.map((i) => [i.model, i.incarnation, i.state]);
      expect(rows).toEqual([["m2", r.incarnation, InstanceState.READY]]);
      expect(second.coord.events.filter((e) => e.incarnation === m1).map((e) => e.type)).toEqual(expect.arrayContaining(["instance.adopted", "eviction.started"]));
    } finally {
      a.resume();
      await sampler.stop();
    }
  });

  it("with a 10-minute recovery window, a load after the restart runs as soon as the journal's node has reported", async () => {
    const onA = { selector: { node: "a" } };
    const s = await setup([simModel("m1", onA), simModel("m3", onA)], "10m");
    // (A first start with an empty journal keeps the fixed wait: agents it does not know may bring backends.)
    const first = await s.start("0s");
    const a = await startRemoteAgent({ coordinator: s.address, nodeId: "a", tag: fileTag });
    agents.push(a);
    await until("a ready", async () => (await first.admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY));
    const m1 = (await first.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    await first.coord.kill();
    const second = await s.start();
    // a re-registers and reports m1 (adopted): the window opens then, not in 10 minutes.
    await second.coord.waitForEvent("instance.adopted", (e) => e.incarnation === m1, 60_000);
    const m3 = await second.admin.loadModel({ model: "m3" }, { timeoutMs: 90_000 }).catch((err: unknown) => {
      // The coordinator's own account of the window and the load is the only one (a failure once, under load).
      const said = second.coord.logLines.filter((l) => /recovery|load|node|inventory|adopt/i.test(String(l["msg"]))).slice(-40);
      throw new Error(`${String(err)}; the coordinator's lines:\n${said.map((l) => JSON.stringify(l)).join("\n")}`);
    });
    expect(m3.instance?.nodeId).toBe("a");
    expect(second.coord.logLines.find((l) => l["msg"] === "recovery window over")).toMatchObject({ cause: "all-reported", notReported: [], unconfirmedReplicas: 0 });
    expect((await runningBackends(fileTag)).map((b) => b.incarnation).sort()).toEqual([m1, m3.instance?.incarnation ?? ""].sort());
  });
});
