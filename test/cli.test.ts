/**
 * The `warden` CLI end to end over real processes: `warden up` as a child
 * process (coordinator + embedded agent + backend-sim models), and each admin
 * command as its own process against it.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService, Health, HealthCheckResponse_ServingStatus } from "@warden/proto";
import { until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");
// The built `warden` an operator runs (rebuilt first if a source changed): a
// short command starts in a fraction of tsx's time, so the many CLI runs here
// do not outlast the test's budget on a loaded machine.
const cliBin = join(root, "services", "cli", "bin", "warden.js");

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function warden(args: string[], env: Record<string, string> = {}): Run {
  const r = spawnSync(process.execPath, [cliBin, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1", ...env }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** Live backend-sim pids listening on one of `addresses`. */
function backendPids(addresses: readonly string[]): number[] {
  const pids: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
      const i = cmd.indexOf("--addr");
      // From sources through tsx, or the prebuilt bundle the test runner names (WARDEN_BACKEND_SIM_BUNDLE).
      if (cmd.some((c) => c.endsWith("backend-sim/src/main.ts") || c.endsWith("/backend-sim.js")) && i >= 0 && addresses.includes(cmd[i + 1] ?? "")) pids.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

let up: ChildProcess | undefined;
let addr = "";
let metricsAddr = "";
let stateDir = "";
let upOut = "";
const seenAddresses = new Set<string>();

beforeAll(async () => {
  stateDir = await mkdtemp(join(tmpdir(), "warden-cli-"));
  addr = `127.0.0.1:${String(await freePort())}`;
  metricsAddr = `127.0.0.1:${String(await freePort())}`;
  up = spawn(process.execPath, ["--import", "tsx", cliMain, "up", "--listen", addr, "--state-dir", stateDir, "--metrics", metricsAddr, "--http", "127.0.0.1:0"], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] });
  up.stdout?.on("data", (b: Buffer) => (upOut += b.toString()));
  up.stderr?.on("data", (b: Buffer) => (upOut += b.toString()));
  await until("warden up banner", () => upOut.includes("Warden is running"), 60_000);
});

afterAll(async () => {
  if (up !== undefined && up.exitCode === null) up.kill("SIGKILL");
  for (const pid of backendPids([...seenAddresses])) process.kill(pid, "SIGKILL");
  await rm(stateDir, { recursive: true, force: true });
});

async function rememberAddresses(): Promise<void> {
  const a = createClient(AdminService, addr);
  for (const i of (await a.listModels({})).instances) if (i.address !== "") seenAddresses.add(i.address);
  a.close();
}

describe("warden CLI (warden up as a real process)", () => {
  it("warden up prints where the APIs listen and three commands to try, and answers health SERVING", async () => {
    expect(upOut).toContain(`Admin API      ${addr}`);
    expect(upOut).toContain(`Inference API  ${addr}`);
    expect(upOut.match(/^ {2}warden (models ls|predict|explain)/gm)).toHaveLength(3);
    // --http 127.0.0.1:0: the banner names the port the OpenAI API got, and it answers there.
    const http = /OpenAI API {5}http:\/\/(127\.0\.0\.1:\d+)\/v1/.exec(upOut)?.[1];
    expect(http).toBeDefined();
    expect(upOut).toContain(`curl http://${http ?? ""}/v1/chat/completions`);
    const models = (await (await fetch(`http://${http ?? ""}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toContain("chat-small");
    // The dashboard's line names the same listener, and the page is served there.
    expect(upOut).toContain(`Dashboard      http://${http ?? ""}/`);
    const page = await fetch(`http://${http ?? ""}/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("/dashboard/app.js");
    const h = createClient(Health, addr);
    expect((await h.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await h.check({ service: "warden.v1.AdminService" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    h.close();
  });

  it("predict streams tokens of the model", async () => {
    const r = warden(["predict", "chat-small", "hello", "--addr", addr]);
    // Nothing on stderr but the progress line of a call that waits for its load (how far it gets depends on timing).
    expect(r.stderr.split(/[\r\n]+/).filter((l) => l.trim() !== "" && !/^(?:waiting for|loading) \S+.* … \d+s$/.test(l.trim()))).toEqual([]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/chat-small/);
    const j = warden(["predict", "chat-small", "hello", "--addr", addr, "--json"]);
    const tokens = j.stdout.trim().split("\n").map((l) => (JSON.parse(l) as { token: string }).token);
    expect(tokens.length).toBeGreaterThan(1);
    await rememberAddresses();
  });

  it("embed, tts and transcribe go through the coordinator's backend.Backend to the model", async () => {
    const e = warden(["embed", "chat-small", "hello", "--addr", addr, "--json"]);
    expect(e.code, e.stderr).toBe(0);
    const embedded = JSON.parse(e.stdout) as { model: string; dim: number; embedding: number[] };
    expect([embedded.model, embedded.dim, embedded.embedding.length]).toEqual(["chat-small", 8, 8]);
    const out = join(stateDir, "hi.wav");
    const t = warden(["tts", "chat-small", "hi", "--out", out, "--addr", addr]);
    expect(t.code, t.stderr).toBe(0);
    expect(t.stdout).toMatch(/^wrote .*hi\.wav \(684 bytes, 16000 Hz WAV\)/);
    expect(readFileSync(out).subarray(0, 4).toString()).toBe("RIFF");
    const x = warden(["transcribe", "chat-small", out, "--addr", addr, "--json"]);
    expect(x.code, x.stderr).toBe(0);
    expect((JSON.parse(x.stdout) as { text: string }).text).toBe("heard hi.wav 684 bytes");
    const missing = warden(["tts", "chat-small", "hi", "--addr", addr]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--out/);
  });

  it("models ls --json parses and matches ListModels", async () => {
    const r = warden(["models", "ls", "--json", "--addr", addr]);
    expect(r.code).toBe(0);
    const parsed = JSON.parse(r.stdout) as { instances: { model: string; incarnation: string; state: string }[] };
    const a = createClient(AdminService, addr);
    const direct = await a.listModels({});
    a.close();
    expect(parsed.instances.map((i) => [i.model, i.incarnation])).toEqual(direct.instances.map((i) => [i.model, i.incarnation]));
    expect(parsed.instances[0]?.state).toBe("INSTANCE_STATE_READY");
  });

  it("explain agrees with what a load does, and grouped models evict each other through predict", async () => {
    const e = warden(["explain", "chat-large", "--json", "--addr", addr]);
    expect(e.code).toBe(0);
    const plan = JSON.parse(e.stdout) as { decision: string; nodeId: string; nodes: { wouldEvict?: string[] }[] };
    expect(plan.decision).toBe("PLACEMENT_DECISION_EVICT_THEN_PLACE");
    expect(plan.nodeId).toBe("local");
    expect(plan.nodes[0]?.wouldEvict?.[0]).toMatch(/^chat-small@/);
    // As the README's walkthrough shows it: the decision, the counts over every node, then each node's verdict.
    const text = warden(["explain", "chat-large", "--addr", addr]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^chat-large: evict-then-place on local — node "local": group conflict with chat-small — evicting there would make room\n1 node\(s\) weighed: 0 fit now, 1 after eviction\n┌/);
    const p = warden(["predict", "chat-large", "hi", "--addr", addr]);
    expect(p.code).toBe(0);
    await rememberAddresses();
    const ls = JSON.parse(warden(["models", "ls", "--json", "--addr", addr]).stdout) as { instances: { model: string; nodeId: string }[] };
    expect(ls.instances.map((i) => [i.model, i.nodeId])).toEqual([["chat-large", plan.nodeId]]);
    const human = warden(["models", "ls", "--addr", addr]);
    expect(human.stdout).toMatch(/chat-large\s+│\s+local\s+│\s+ready/);
  });

  it("metrics show the eviction counters after an eviction", async () => {
    const text = await until("eviction counter", async () => {
      const r = await fetch(`http://${metricsAddr}/metrics`);
      const t = await r.text();
      return /warden_evictions_total\{reason="group",outcome="stopped"\} [1-9]/.test(t) ? t : undefined;
    });
    expect(text).toMatch(/warden_instances\{node="local",state="ready"\} 1/);
    expect(text).toMatch(/# TYPE warden_load_duration_seconds histogram/);
  });

  it("policy set changes the live policy; bad values are rejected naming the field", () => {
    expect(warden(["policy", "set", "idleTimeout=90s", "--addr", addr]).code).toBe(0);
    const g = JSON.parse(warden(["policy", "get", "--json", "--addr", addr]).stdout) as { policy: { idleTimeoutMs: string } };
    expect(g.policy.idleTimeoutMs).toBe("90000");
    const bad = warden(["policy", "set", "memoryThreshold=7", "--addr", addr]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("memoryThreshold: expected a fraction in (0, 1]");
    expect(bad.stderr).not.toContain("memory_threshold");
  });

  it("every command's --help exits 0", () => {
    for (const cmd of [[], ["up"], ["coordinator"], ["agent"], ["models"], ["models", "ls"], ["models", "load"], ["models", "unload"], ["nodes", "ls"], ["nodes", "drain"], ["nodes", "undrain"], ["nodes", "lost"], ["policy", "get"], ["policy", "set"], ["explain"], ["predict"], ["embed"], ["tts"], ["transcribe"], ["events"], ["nats", "provision"], ["certs", "init"], ["trace", "synth"], ["trace", "export"], ["policy", "simulate"]]) {
      const r = warden([...cmd, "--help"]);
      expect(r.code, cmd.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/Usage: warden/);
    }
  });

  it("nodes lost refuses the embedded agent's node (exit 7), an unknown node (exit 4) and an empty id (exit 2), each in one line, and changes nothing", async () => {
    const local = warden(["nodes", "lost", "local", "--reason", "test", "--addr", addr]);
    expect(local.code).toBe(7);
    expect(local.stderr.trim().split("\n")).toHaveLength(1);
    expect(local.stderr).toMatch(/embedded agent/);
    const unknown = warden(["nodes", "lost", "no-such-node", "--addr", addr]);
    expect(unknown.code).toBe(4);
    expect(unknown.stderr).toMatch(/no-such-node/);
    const empty = warden(["nodes", "lost", "", "--addr", addr]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/node_id/);
    const ls = JSON.parse(warden(["nodes", "ls", "--json", "--addr", addr]).stdout) as { nodes: { nodeId: string; state: string }[] };
    expect(ls.nodes.map((n) => [n.nodeId, n.state])).toEqual([["local", "NODE_STATE_READY"]]);
    await rememberAddresses();
  });

  it("a wrong address gives a one-line error and a non-zero exit, not a stack trace", async () => {
    const dead = `127.0.0.1:${String(await freePort())}`;
    const r = warden(["models", "ls", "--addr", dead]);
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(`cannot reach Warden at ${dead}`);
    const viaEnv = warden(["nodes", "ls"], { WARDEN_ADDR: dead });
    expect(viaEnv.code).toBe(3);
    const unknown = warden(["models", "unload", "no-such-model", "--addr", addr]);
    expect(unknown.code).toBe(4);
    expect(unknown.stderr.trim().split("\n")).toHaveLength(1);
  });

  it("Ctrl-C (SIGINT) stops warden up and leaves no backend-sim running", async () => {
    // Loaded now: on a loaded machine the earlier tests outlast the 90 s idle timeout set above.
    expect(warden(["models", "load", "chat-small", "--addr", addr]).code).toBe(0);
    await rememberAddresses();
    expect(seenAddresses.size).toBeGreaterThan(0);
    const running = backendPids([...seenAddresses]);
    expect(running.length).toBeGreaterThan(0);
    const exited = new Promise<number | null>((r) => up?.once("exit", (code) => { r(code); }));
    up?.kill("SIGINT");
    expect(await exited).toBe(0);
    expect(backendPids([...seenAddresses])).toEqual([]);
  });
});
