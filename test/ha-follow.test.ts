/**
 * Following the coordinator across a list of addresses, with real
 * processes: a coordinator child, an agent child started with
 * `--coordinator B,A` while only A runs, the CLI with a dead address listed
 * first. Then A is killed with SIGKILL and another coordinator starts at B:
 * the agent switches to B by itself (B was down when it registered), registers
 * there, and B adopts its backend with the same pid; the CLI given `dead,A,B`
 * reaches B.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InstanceState, NodeState } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { runningBackends } from "./support/chaos-checks.js";
import { freePort } from "./support/free-port.js";

const fileTag = uniqueTag("ha-follow");
const root = fileURLToPath(new URL("..", import.meta.url));
const cliMain = join(root, "services", "cli", "src", "main.ts");

let coordinators: CoordinatorProcess[] = [];
let agents: RemoteAgent[] = [];
let clients: Client<typeof AdminService>[] = [];
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

/** `warden <args>` as its own process (async: the coordinator and agent children keep being read). */
function warden(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, timeout: 120_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : 1;
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * `n` distinct free addresses. A port found free is not held, so two lookups in a row can return
 * the same one (seen once: the dead address and A's were equal, and the CLI refused the list).
 */
async function distinctAddrs(n: number): Promise<string[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports].map((p) => `127.0.0.1:${String(p)}`);
}

describe("following the coordinator over an address list (coordinator, agent, CLI processes)", { timeout: 240_000 }, () => {
  it("CLI and agent skip a dead address; after the coordinator dies, the agent registers with the one at its other address, which adopts the backend with the same pid", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-ha-follow-"));
    dirs.push(dir);
    const [dead, a, b] = (await distinctAddrs(3)) as [string, string, string];
    const config = (listen: string, name: string): Record<string, unknown> => ({
      listen,
      stateDir: join(dir, name),
      embeddedAgent: false,
      policy: { tickInterval: "100ms" },
      recoveryWindow: "500ms",
      nodeGrace: "120s",
      models: [simModel("m", { memoryEstimate: "1GiB" })],
    });
    const coordA = await startCoordinatorProcess(join(dir, "a.yaml"), config(a, "a"));
    coordinators.push(coordA);
    const adminA = createClient(AdminService, a);
    clients.push(adminA);

    // The agent lists B (nobody there yet) before A: it registers with A.
    const agent = await startRemoteAgent({ coordinator: `${b},${a}`, nodeId: "n1", tag: fileTag });
    agents.push(agent);
    await until("n1 ready at A", async () => (await adminA.listNodes({})).nodes.some((n) => n.nodeId === "n1" && n.state === NodeState.READY), 60_000);
    // The CLI: a dead address first, then the live one.
    const load = await warden(["models", "load", "m", "--json", "--addr", `${dead},${a}`]);
    expect(load.code, load.stderr).toBe(0);
    const inc = (JSON.parse(load.stdout) as { instance?: { incarnation?: string } }).instance?.incarnation ?? "";
    expect(inc).not.toBe("");
    const [before] = (await runningBackends(fileTag)).filter((r) => r.incarnation === inc);
    expect(before).toBeDefined();

    // A dies without a word; another coordinator starts at B (the agent's first address, down until now).
    await coordA.kill();
    const coordB = await startCoordinatorProcess(join(dir, "b.yaml"), config(b, "b"));
    coordinators.push(coordB);
    const adminB = createClient(AdminService, b);
    clients.push(adminB);
    await until("n1 ready at B", async () => (await adminB.listNodes({})).nodes.some((n) => n.nodeId === "n1" && n.state === NodeState.READY), 60_000);
    await coordB.waitForEvent("instance.adopted", (e) => e.incarnation === inc, 60_000);
    await until("m ready at B", async () => (await adminB.listModels({})).instances.some((i) => i.incarnation === inc && i.state === InstanceState.READY), 60_000);
    const after = (await runningBackends(fileTag)).filter((r) => r.incarnation === inc);
    expect(after.map((r) => r.pid)).toEqual([before?.pid]);
    expect(agent.proc.lines.filter((l) => l.includes(`following the coordinator leader at ${b}`))).toHaveLength(1);

    // The CLI with the whole list (dead, the dead A, the live B) reaches B: admin and inference commands.
    const list = `${dead},${a},${b}`;
    const [ls, predict] = await Promise.all([warden(["models", "ls", "--json", "--addr", list]), warden(["predict", "m", "again", "--addr", list])]);
    expect(ls.code, ls.stderr).toBe(0);
    expect((JSON.parse(ls.stdout) as { instances?: { incarnation?: string }[] }).instances?.map((i) => i.incarnation)).toEqual([inc]);
    expect(predict.code, predict.stderr).toBe(0);
    expect((await runningBackends(fileTag)).filter((r) => r.incarnation === inc).map((r) => r.pid)).toEqual([before?.pid]);
  });
});
