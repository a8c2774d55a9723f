/**
 * Delta heartbeats between real processes: a coordinator process and an agent
 * process (heartbeat every 250 ms, so each steady second is four deltas) with
 * real backend-sim processes. A backend is started and stopped; throughout,
 * ListModels lists exactly what the process table runs (nothing forgotten
 * while the agent sends only empty deltas, nothing left listed after the
 * stop), and the agent's own log shows the deltas it sent: the start as an
 * upsert, the stop as a removal, never a full inventory asked for. A
 * coordinator restart then starts from a full inventory, which brings the
 * running backend back into the listing (adopted).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InstanceState, NodeState } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { runningBackends } from "./support/chaos-checks.js";

const fileTag = uniqueTag("delta-hb");
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

interface Sent {
  readonly kind: "full" | "delta";
  readonly upserts: number;
  readonly removed: number;
}

/** The heartbeats the agent logged (debug "heartbeat sent") since line `from`. */
function sentSince(a: RemoteAgent, from: number): Sent[] {
  const out: Sent[] = [];
  for (const line of a.proc.lines.slice(from)) {
    let l: Record<string, unknown>;
    try {
      l = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (l["msg"] === "heartbeat sent") out.push({ kind: l["kind"] === "full" ? "full" : "delta", upserts: Number(l["upserts"] ?? 0), removed: Number(l["removed"] ?? 0) });
  }
  return out;
}

/** ListModels against the process table, sampled every 100 ms until `done` resolves: each mismatch as text. */
async function watchListings(admin: Client<typeof AdminService>, done: Promise<unknown>, expected: () => readonly string[]): Promise<{ samples: number; wrong: string[] }> {
  const phase = { finished: false };
  void done.finally(() => {
    phase.finished = true;
  });
  let samples = 0;
  const wrong: string[] = [];
  while (!phase.finished) {
    const want = expected();
    const listed = (await admin.listModels({})).instances.filter((i) => i.state === InstanceState.READY).map((i) => `${i.model}@${i.nodeId}:${i.incarnation}`);
    const running = (await runningBackends(fileTag)).map((b) => b.incarnation);
    samples++;
    // Both views are read at slightly different moments: judge only samples where the process table matches the phase.
    if (running.join() === want.map((w) => w.split(":")[1]).join() && listed.join() !== want.join()) wrong.push(`listed ${JSON.stringify(listed)}, running ${JSON.stringify(running)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { samples, wrong };
}

describe("delta heartbeats (coordinator, agent and backend processes)", { timeout: 240_000 }, () => {
  it("a backend started and stopped: listings match the process table throughout, the agent sends deltas, and a restarted coordinator gets a full inventory", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-delta-hb-"));
    dirs.push(dir);
    const address = `127.0.0.1:${String(await freePort())}`;
    const config = {
      listen: address,
      stateDir: join(dir, "state"),
      embeddedAgent: false,
      policy: { tickInterval: "100ms" },
      // A slow machine delays heartbeats: nothing here is about node loss.
      nodeGrace: "120s",
      recoveryWindow: "0s",
      models: [simModel("m1", { selector: { node: "a" } })],
    };
    const start = async (n: number) => {
      const coord = await startCoordinatorProcess(join(dir, `coordinator-${String(n)}.yaml`), config);
      coordinators.push(coord);
      const admin = createClient(AdminService, coord.address);
      clients.push(admin);
      return { coord, admin };
    };
    const first = await start(0);
    const a = await startRemoteAgent({ coordinator: address, nodeId: "a", tag: fileTag, env: { LOG_LEVEL: "debug" } });
    agents.push(a);
    await until("a ready", async () => (await first.admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY));
    await until("a's first deltas", () => sentSince(a, 0).filter((s) => s.kind === "delta").length >= 2);

    const beforeLoad = a.proc.lines.length;
    const m1 = (await first.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(m1).not.toBe("");
    const row = `m1@a:${m1}`;
    // Steady: the agent sends empty deltas; the instance stays listed, once, the whole time.
    const steadyUntil = until("sixteen heartbeats after the load", () => sentSince(a, beforeLoad).length >= 16, 60_000);
    const steady = await watchListings(first.admin, steadyUntil, () => [row]);
    expect(steady.samples).toBeGreaterThan(0);
    expect(steady.wrong).toEqual([]);
    const afterLoad = sentSince(a, beforeLoad);
    // The start reached the coordinator as one upsert (loading, then ready: at most a few), never a full inventory.
    expect(afterLoad.filter((s) => s.kind === "full")).toEqual([]);
    expect(afterLoad.some((s) => s.upserts > 0)).toBe(true);
    expect(afterLoad.slice(-4)).toEqual(Array.from({ length: 4 }, () => ({ kind: "delta", upserts: 0, removed: 0 })));

    const beforeUnload = a.proc.lines.length;
    await first.admin.unloadModel({ model: "m1" }, { timeoutMs: 60_000 });
    await until("m1's process gone", async () => (await runningBackends(fileTag)).length === 0, 60_000);
    const goneUntil = until("sixteen heartbeats after the stop", () => sentSince(a, beforeUnload).length >= 16, 60_000);
    const gone = await watchListings(first.admin, goneUntil, () => []);
    expect(gone.wrong).toEqual([]);
    const afterUnload = sentSince(a, beforeUnload);
    expect(afterUnload.filter((s) => s.kind === "full")).toEqual([]);
    expect(afterUnload.some((s) => s.removed > 0)).toBe(true);
    expect(a.proc.lines.some((l) => l.includes("coordinator asks for a full inventory"))).toBe(false);

    // A restarted coordinator holds no inventory of this agent: it asks it to register, and its next heartbeat is full.
    const m1again = (await first.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    await first.coord.kill();
    const beforeRestart = a.proc.lines.length;
    const second = await start(1);
    await until("m1 listed by the restarted coordinator", async () => (await second.admin.listModels({})).instances.some((i) => i.incarnation === m1again && i.state === InstanceState.READY), 60_000);
    const afterRestart = sentSince(a, beforeRestart);
    const firstFull = afterRestart.findIndex((s) => s.kind === "full");
    expect(firstFull).toBeGreaterThanOrEqual(0);
    expect((await runningBackends(fileTag)).map((b) => b.incarnation)).toEqual([m1again]);
  });
});
