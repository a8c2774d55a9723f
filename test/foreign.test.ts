/**
 * Warden never signals a process it did not start. A process listening in an
 * agent's port range without the agent's mark (WARDEN_NODE_ID,
 * WARDEN_INCARNATION, WARDEN_AGENT_TOKEN in its environment) is foreign:
 * reported (ListBackends, ListNodes, one coalesced foreign.detected event, the
 * warden_agent_foreign_processes metric), its port skipped by the allocator,
 * never signalled — not after orphanGrace, not through StopOrphan. Two agents
 * with overlapping port ranges never touch each other's backends. Only a
 * marked process of this agent without a record is an orphan (stopped after
 * the grace). Real processes throughout; no timing assumptions: the grace is
 * known to have passed when a marked witness orphan was stopped.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { AgentService, EvictionReason, InstanceState, NodeState } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { backendSimMainPath, repoRootPath } from "../services/agent/src/backend-sim-catalog.js";
import { createAgentMetrics } from "../services/agent/src/agent-metrics.js";
import { agentMarkOf, markEnv } from "../services/agent/src/process-mark.js";
import { newIncarnation, pidAlive, environOf, simCatalog, startAgentHarness, startReady, tempDir, uniqueTag, waitFor, type AgentHarness } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { quietPortRange } from "./support/port-range.js";

const tag = uniqueTag("foreign");
let t: TestCoordinator | undefined;
let remotes: RemoteAgent[] = [];
let harnesses: AgentHarness[] = [];
const strays: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const h of harnesses) await h.close({ stopBackends: true });
  harnesses = [];
  for (const a of remotes) await a.cleanup();
  remotes = [];
  await t?.close();
  t = undefined;
  for (const c of strays.splice(0)) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  expect(await liveRemoteAgents()).toEqual([]);
});

/** Is something listening on `host:port` (per /proc/net/tcp)? */
async function listening(host: string, port: number): Promise<boolean> {
  const hex = host.split(".").reverse().map((b) => Number(b).toString(16).toUpperCase().padStart(2, "0")).join("");
  return (await readFile("/proc/net/tcp", "utf8")).includes(`${hex}:${port.toString(16).toUpperCase().padStart(4, "0")} 00000000:0000 0A`);
}

/**
 * A plain TCP server (another program), not started by Warden. It survives
 * SIGTERM, SIGINT and SIGHUP and prints each, so any signal but SIGKILL shows
 * in `signals()`; SIGKILL shows as death.
 */
async function foreignServer(host: string, port: number): Promise<{ child: ChildProcess; pid: number; signals: () => string }> {
  const code = `const s = require("node:net").createServer((c) => c.end()); for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(sig, () => process.stdout.write("got " + sig + "\\n")); s.listen(${String(port)}, ${JSON.stringify(host)});`;
  const child = spawn(process.execPath, ["-e", code], { stdio: ["ignore", "pipe", "ignore"], env: { PATH: process.env.PATH ?? "" } });
  strays.push(child);
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  await waitFor(`foreign server on ${host}:${String(port)}`, () => listening(host, port));
  return { child, pid: child.pid ?? 0, signals: () => out };
}

/** backend-sim on 127.0.0.1:port started by hand, with `env` (no mark unless given one). */
async function handStartedSim(port: number, env: Record<string, string> = {}): Promise<{ child: ChildProcess; pid: number }> {
  const child = spawn(process.execPath, ["--import", "tsx", backendSimMainPath, "--addr", `127.0.0.1:${String(port)}`], { cwd: repoRootPath, stdio: "ignore", env: { ...env, PATH: process.env.PATH ?? "" } });
  strays.push(child);
  await waitFor(`backend-sim on ${String(port)}`, () => listening("127.0.0.1", port), 30_000);
  return { child, pid: child.pid ?? 0 };
}

describe("foreign processes", () => {
  it("an unmarked listener in the port range is reported (ListNodes, one coalesced foreign.detected, the metric), never signalled past orphanGrace, and its port skipped", async () => {
    const ports = await quietPortRange(4);
    const p = (i: number): number => ports.min + i;
    // another program on 127.0.0.2:p0 (a bind probe on 127.0.0.1 does not see it) and an unmarked backend-sim on p1
    const other = await foreignServer("127.0.0.2", p(0));
    const sim = await handStartedSim(p(1));
    const tc = await startTestCoordinator({
      models: [simModel("m")],
      agent: { ports: { min: ports.min, max: ports.max, quarantine: "0s" }, orphanScanInterval: "200ms", heartbeatInterval: "250ms" },
      extra: { orphanGrace: "1s" },
    });
    t = tc;
    const agent = tc.c.agent!;
    const detected = await tc.waitForEvent("foreign.detected", (e) => e.nodeId === agent.config.nodeId);
    expect(detected.payload.case).toBe("foreignDetected");
    if (detected.payload.case !== "foreignDetected") return;
    // coalesced: both in one event
    expect(detected.payload.value.count).toBe(2);
    expect([...detected.payload.value.pids].sort()).toEqual([other.pid, sim.pid].sort());
    expect([...detected.payload.value.addresses].sort()).toEqual([`127.0.0.1:${String(p(0))}`, `127.0.0.1:${String(p(1))}`]);

    // a witness: a marked process of this agent without a record is an orphan, stopped after the grace
    const witness = await handStartedSim(p(2), markEnv(agentMarkOf(agent.config.nodeId, agent.config.stateDir), newIncarnation()));
    const adopted = await tc.waitForEvent("orphan.adopted", (e) => e.address === `127.0.0.1:${String(p(2))}`);
    expect(adopted.payload.case === "orphanAdopted" && adopted.payload.value.pid).toBe(witness.pid);
    const stopped = await tc.waitForEvent("eviction.stopped", (e) => e.address === `127.0.0.1:${String(p(2))}`);
    expect(stopped.payload.case === "evictionStopped" && stopped.payload.value.reason).toBe(EvictionReason.ORPHAN);
    await waitFor("witness gone", async () => !(await pidAlive(witness.pid)));

    // the grace has passed: the foreign processes are untouched
    expect(await pidAlive(other.pid)).toBe(true);
    expect(await pidAlive(sim.pid)).toBe(true);
    expect(other.signals()).toBe("");
    const node = (await tc.admin.listNodes({})).nodes.find((n) => n.nodeId === agent.config.nodeId);
    expect(node?.foreign.map((f) => f.pid).sort()).toEqual([other.pid, sim.pid].sort());
    expect(node?.foreign.find((f) => f.pid === sim.pid)?.detail).toBe("no Warden mark");
    // (the witness leaves the coordinator's view at the next heartbeat; the foreign ones were never in it)
    await until("no orphan listed", async () => (await tc.admin.listModels({})).instances.every((i) => i.state !== InstanceState.ORPHAN));
    const metrics = await createAgentMetrics(agent).getSingleMetricAsString("warden_agent_foreign_processes");
    expect(metrics).toMatch(/^warden_agent_foreign_processes 2$/m);

    // the allocator skips the foreign ports (p0 although a bind on 127.0.0.1 would pass)
    const loaded = (await tc.admin.loadModel({ model: "m" })).instance!;
    expect([`127.0.0.1:${String(p(2))}`, `127.0.0.1:${String(p(3))}`]).toContain(loaded.address);
    // one event for the one scan that found them; no eviction ever aimed at them
    expect(tc.events.filter((e) => eventTypeOf(e) === "foreign.detected")).toHaveLength(1);
    const foreignAddresses = new Set([`127.0.0.1:${String(p(0))}`, `127.0.0.1:${String(p(1))}`]);
    expect(tc.events.filter((e) => eventTypeOf(e).startsWith("eviction.") && foreignAddresses.has(e.address))).toEqual([]);
    expect(await pidAlive(other.pid)).toBe(true);
    expect(await pidAlive(sim.pid)).toBe(true);
    expect(other.signals()).toBe("");
  });

  it("two agents with overlapping port ranges and different node ids never touch each other's backends", async () => {
    const ports = await quietPortRange(4);
    const tc = await startTestCoordinator({
      embeddedAgent: false,
      models: [simModel("on-a", { selector: { node: "na" } }), simModel("on-b", { selector: { node: "nb" } })],
      extra: { orphanGrace: "1s" },
    });
    t = tc;
    const config = { ports: { min: ports.min, max: ports.max, quarantine: "0s" }, orphanScanInterval: "200ms" };
    const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "na", tag, config });
    const b = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "nb", tag, config });
    remotes.push(a, b);
    await until("both nodes ready", async () => (await tc.admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2);
    const onA = (await tc.admin.loadModel({ model: "on-a" })).instance!;
    const onB = (await tc.admin.loadModel({ model: "on-b" })).instance!;
    expect(onA.nodeId).toBe("na");
    expect(onB.nodeId).toBe("nb");
    const ca = createClient(AgentService, a.address);
    const cb = createClient(AgentService, b.address);
    try {
      const pidOf = async (c: typeof ca, model: string): Promise<number> => (await c.listBackends({})).backends.find((x) => x.model === model)?.pid ?? 0;
      const pidA = await pidOf(ca, "on-a");
      const pidB = await pidOf(cb, "on-b");
      // each agent sees the other's backend as foreign (marked for another node), never as an orphan
      const seenBy = async (c: typeof ca, pid: number, node: string) =>
        waitFor(`${node}'s backend reported foreign`, async () => {
          const r = await c.listBackends({});
          return r.foreign.find((f) => f.pid === pid) !== undefined ? r : undefined;
        });
      const invA = await seenBy(ca, pidB, "nb");
      const invB = await seenBy(cb, pidA, "na");
      expect(invA.foreign.find((f) => f.pid === pidB)?.detail).toBe("marked for node nb");
      expect(invB.foreign.find((f) => f.pid === pidA)?.detail).toBe("marked for node na");
      expect(invA.orphans).toEqual([]);
      expect(invB.orphans).toEqual([]);

      // a witness orphan of na in the shared range: stopped after the grace by na, left alone by nb
      const witness = await handStartedSim(ports.max, markEnv(agentMarkOf("na", a.stateDir), newIncarnation()));
      await tc.waitForEvent("eviction.stopped", (e) => e.nodeId === "na" && e.address === `127.0.0.1:${String(ports.max)}`);
      await waitFor("witness gone", async () => !(await pidAlive(witness.pid)));

      expect(await pidAlive(pidA)).toBe(true);
      expect(await pidAlive(pidB)).toBe(true);
      const nodes = new Map((await tc.admin.listNodes({})).nodes.map((n) => [n.nodeId, n]));
      expect(nodes.get("na")?.foreign.map((f) => f.pid)).toContain(pidB);
      expect(nodes.get("nb")?.foreign.map((f) => f.pid)).toContain(pidA);
      const ready = (await tc.admin.listModels({})).instances.filter((i) => i.state === InstanceState.READY).map((i) => i.model).sort();
      expect(ready).toEqual(["on-a", "on-b"]);
      const backendAddresses = new Set([onA.address, onB.address]);
      expect(tc.events.filter((e) => eventTypeOf(e).startsWith("eviction.") && backendAddresses.has(e.address))).toEqual([]);
    } finally {
      ca.close();
      cb.close();
    }
  });

  it("StopOrphan refuses a foreign pid (another agent of the same node id) and stops a marked child of this agent whose record is gone", async () => {
    const ports = await quietPortRange(4);
    const stateA = await tempDir("warden-foreign-a");
    dirs.push(stateA);
    // same node id, different state dirs: e.g. `npm test` beside `npm start`
    // a catalog cannot forge the mark
    const catalog = { sim: simCatalog(tag, { WARDEN_NODE_ID: "forged", WARDEN_AGENT_TOKEN: "forged" }) };
    const a = await startAgentHarness({ tag, ports, stateDir: stateA, catalog });
    harnesses.push(a);
    const b = await startAgentHarness({ tag, ports });
    harnesses.push(b);
    const ra = await startReady(a.client, "m-a");
    const rb = await startReady(b.client, "m-b");
    const env = await environOf(ra.pid);
    expect(env).toMatchObject({ WARDEN_NODE_ID: "test-node", WARDEN_INCARNATION: ra.incarnation, WARDEN_AGENT_TOKEN: agentMarkOf("test-node", stateA).token });
    await a.agent.rescanOrphans();
    const la = await a.client.listBackends({});
    expect(la.orphans).toEqual([]);
    expect(la.foreign.find((f) => f.pid === rb.pid)?.detail).toBe("marked for node test-node by another agent (another state dir)");
    const refused = await a.client.stopOrphan({ pid: rb.pid, address: rb.address, reason: "orphan" }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(WardenError);
    expect((refused as WardenError).code).toBe(Code.FailedPrecondition);
    expect(await pidAlive(rb.pid)).toBe(true);

    // agent a goes away leaving its backend; its record is lost; the next agent of that state dir finds its mark
    harnesses.splice(harnesses.indexOf(a), 1);
    await a.close({ stopBackends: false });
    await rm(join(stateA, `${ra.incarnation}.json`));
    const a2 = await startAgentHarness({ tag, ports, stateDir: stateA });
    harnesses.push(a2);
    const orphan = (await a2.client.listBackends({})).orphans.find((o) => o.pid === ra.pid);
    expect(orphan?.address).toBe(ra.address);
    const r = await a2.client.stopOrphan({ pid: ra.pid, address: ra.address, reason: "orphan" });
    expect(r.outcome.case).toBe("stopped");
    expect(await pidAlive(ra.pid)).toBe(false);
    expect(await pidAlive(rb.pid)).toBe(true);
  });
});
