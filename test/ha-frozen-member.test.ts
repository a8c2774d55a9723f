/**
 * Clients skip a frozen member, over real processes: three nats-servers, two
 * coordinators with `ha:`, one agent following both, the CLI as its own
 * process. A SIGSTOPped process still accepts TCP connections (its kernel
 * does) but answers nothing: the leader-following client must give up on it
 * after its per-attempt liveness bound (2 s) instead of the call's deadline
 * (the CLI's --timeout here, 20 s: a call stuck on the frozen member ends
 * DEADLINE_EXCEEDED, exit 5).
 *
 * - the standby frozen and listed first: `ha status`, `models ls` and
 *   `predict` answer from the leader;
 * - the leader frozen and listed first, once the other member leads:
 *   `models ls` and `predict` answer from the new leader, and the agent
 *   follows it by itself (the backend stays the same process);
 * - the same for a following client built with its defaults (grpc-js per
 *   address, not the CLI's lean client);
 * - the leader frozen while `warden events --follow` streams from it: the
 *   stream ends after the bound (PINGs unanswered) instead of hanging, and the
 *   CLI reopens it on the new leader.
 */
import { execFile, spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it, onTestFailed } from "vitest";
import { runningBackends } from "./support/chaos-checks.js";
import { simModel, until } from "./support/coordinator-harness.js";
import type { HaCluster } from "./support/ha-cluster.js";
import { haClusterLifecycle } from "./support/ha-cluster-lifecycle.js";
import { createLeaderFollowingClient } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";

const root = fileURLToPath(new URL("..", import.meta.url));
const cliMain = join(root, "services", "cli", "src", "main.ts");

const ha = haClusterLifecycle();

/** `warden <args>` as its own process, with a 20 s call deadline (exit 5 when a call waits it out). */
function warden(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ["--import", "tsx", cliMain, ...args, "--timeout", "20s"], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, timeout: 120_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : 1;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Loads `model`, or unloads it when it is loaded: an event either way (when the member leads). Always false: `until` goes on. */
async function toggle(admin: HaCluster["coords"][number]["admin"], model: string): Promise<false> {
  const listed = await admin.listModels({}, { timeoutMs: 10_000 }).catch(() => undefined);
  if (listed === undefined) return false;
  if (listed.instances.some((i) => i.model === model)) await admin.unloadModel({ model }, { timeoutMs: 30_000 }).catch(() => undefined);
  else await admin.loadModel({ model }, { timeoutMs: 30_000 }).catch(() => undefined);
  return false;
}

async function start(name: string, more: Record<string, unknown>[] = []): Promise<HaCluster> {
  return ha.start({ name, models: [simModel("m", { knobs: { predict_tokens: 1 } }), ...more] }, 80);
}

describe("clients skip a frozen (SIGSTOPped) member", { timeout: 300_000 }, () => {
  it("a frozen standby listed first: ha status, models ls and predict answer from the leader", async () => {
    const c = await start("ha-frozen-standby");
    await c.addAgent("a");
    const { coord: leader } = await c.leader();
    const standby = c.coords[1 - leader.index]!;
    await leader.admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
    standby.pause();
    const addr = `${standby.address},${leader.address}`;
    const [status, ls, predict] = await Promise.all([warden(["ha", "status", "--json", "--addr", addr]), warden(["models", "ls", "--json", "--addr", addr]), warden(["predict", "m", "hi", "--addr", addr])]);
    // A default-constructed following client (grpc-js per address): the same bound, a read and a write.
    const admin = createLeaderFollowingClient(AdminService, [standby.address, leader.address]);
    const inference = createLeaderFollowingClient(InferenceService, [standby.address, leader.address]);
    const [listed, predicted] = await Promise.all([
      admin.listModels({}, { timeoutMs: 20_000 }).catch((e: unknown) => e),
      inference.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: 20_000 }).catch((e: unknown) => e),
    ]);
    admin.close();
    inference.close();
    standby.resume();
    expect(listed, String(listed)).not.toBeInstanceOf(Error);
    expect((listed as { instances: { model: string }[] }).instances.map((i) => i.model)).toEqual(["m"]);
    expect(predicted, String(predicted)).not.toBeInstanceOf(Error);
    // `ha status` asks the first member that answers: the leader here, which says it leads.
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(leader.address);
    expect(ls.code, ls.stderr).toBe(0);
    expect((JSON.parse(ls.stdout) as { instances?: { model?: string }[] }).instances?.map((i) => i.model)).toEqual(["m"]);
    expect(predict.code, predict.stderr).toBe(0);
  });

  it("a frozen leader listed first: once the other member leads, models ls and predict answer from it, and the agent follows it with the same backend", async () => {
    const c = await start("ha-frozen-leader");
    await c.addAgent("a");
    const { coord: old } = await c.leader();
    const next = c.coords[1 - old.index]!;
    await old.admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
    const before = await runningBackends(c.tag);
    expect(before).toHaveLength(1);
    old.pause();
    await until("the other member leads", async () => (await next.status(1_000))?.self?.role === "leader", 60_000);
    const addr = `${old.address},${next.address}`;
    const ls = await warden(["models", "ls", "--json", "--addr", addr]);
    expect(ls.code, ls.stderr).toBe(0);
    // Routed by the new leader once the agent re-registered there (the instance adopted, not restarted).
    await until("predict routed by the new leader", async () => (await warden(["predict", "m", "hi", "--addr", addr])).code === 0, 60_000);
    const predict = await warden(["predict", "m", "again", "--addr", addr]);
    old.resume();
    expect(predict.code, predict.stderr).toBe(0);
    expect((await runningBackends(c.tag)).map((r) => r.pid)).toEqual(before.map((r) => r.pid));
  });

  it("the leader frozen while `warden events --follow` streams from it: the stream ends after the bound and reopens on the new leader", async () => {
    const c = await start("ha-frozen-events", [simModel("m2", { knobs: { predict_tokens: 1 } })]);
    await c.addAgent("a");
    const { coord: old } = await c.leader();
    const next = c.coords[1 - old.index]!;
    const cli = spawn(process.execPath, ["--import", "tsx", cliMain, "events", "--follow", "--json", "--addr", `${old.address},${next.address}`], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] });
    const out: string[] = [];
    let err = "";
    let partial = "";
    cli.stdout.on("data", (d: Buffer) => {
      const lines = (partial + d.toString()).split("\n");
      partial = lines.pop() ?? "";
      out.push(...lines);
    });
    cli.stderr.on("data", (d: Buffer) => (err += d.toString()));
    onTestFailed(() => {
      console.error(`--- warden events stderr:\n${err}\n--- stdout:\n${out.join("\n")}`);
    });
    try {
      // The stream is open and has delivered (the follower's first message: after it the stream is the old leader's).
      await until("warden events follows the leader", async () => err.includes("following events") || (await toggle(old.admin, "m")), 60_000);
      old.pause();
      // Its PINGs go unanswered: the stream ends UNAVAILABLE (before, it waited forever) and the CLI reopens it.
      await until("the frozen leader's stream ends", () => Promise.resolve(err.includes("went away")), 60_000);
      await until("the other member leads", async () => (await next.status(1_000))?.self?.role === "leader", 60_000);
      await until("an event of the new leader reaches warden events", async () => out.some((l) => l.includes('"m2"')) || (await toggle(next.admin, "m2")), 90_000);
    } finally {
      old.resume();
      cli.kill("SIGINT");
      if (cli.exitCode === null && cli.signalCode === null) await new Promise((r) => cli.once("exit", r));
    }
  });
});
