/**
 * Rough edges a new user met, against a real `warden up` process: an unknown
 * node or a model that is not loaded is said (exit 4), a load whose only
 * node drains answers after `loadWait` with the reason (exit 3) instead of
 * counting to the call's deadline, policy errors name the setting typed, the banner shows the effective
 * policy and the state dir, and `warden events` says the coordinator went away.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";
import { testPortRange } from "./support/port-range.js";
import { humanBytes } from "../services/cli/src/admin-actions.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");
const cli = (args: string[]): string[] => ["--import", "tsx", cliMain, ...args];

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, cli(args), { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

let up: ChildProcess | undefined;
let addr = "";
let dir = "";
let upOut = "";
let upStdout = "";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-rough-"));
  addr = `127.0.0.1:${String(await freePort())}`;
  const ports = testPortRange(20);
  await writeFile(
    join(dir, "c.yaml"),
    `listen: ${addr}\nstateDir: ${join(dir, "state")}\nloadWait: 3s\nagent: { ports: { min: ${String(ports.min)}, max: ${String(ports.max)} }, nvidiaSmi: "" }\nmodels:\n  - { id: a, backend: backend-sim, options: ["sim.predict_tokens:2"] }\n  - { id: b, backend: backend-sim }\n`,
  );
  up = spawn(process.execPath, cli(["up", "--config", join(dir, "c.yaml"), "--log-json", "--http", "off"]), { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] });
  up.stdout?.on("data", (b: Buffer) => {
    upOut += b.toString();
    upStdout += b.toString();
  });
  up.stderr?.on("data", (b: Buffer) => (upOut += b.toString()));
  await until("warden up banner", () => upOut.includes("Warden is running"), 90_000);
});

afterAll(async () => {
  if (up !== undefined && up.exitCode === null) {
    up.kill("SIGINT");
    await new Promise((r) => up?.once("exit", r));
  }
  await rm(dir, { recursive: true, force: true });
});

describe("rough edges (warden up as a real process)", () => {
  it("under --log-json stdout is one JSON record per line: the banner is not mixed in", () => {
    const lines = upStdout.split("\n").filter((l) => l !== "");
    expect(lines.length).toBeGreaterThan(0);
    const notJson = lines.filter((l) => {
      try {
        return typeof JSON.parse(l) !== "object";
      } catch {
        return true;
      }
    });
    expect(notJson).toEqual([]);
  });

  it("the banner shows the effective policy (no policy: block = every check off, no limit) and the state dir", () => {
    expect(upOut).toContain("Policy         limitPerNode=unlimited idleCheck=off busyCheck=off memoryReclaimer=off");
    expect(upOut).toContain(`State dir      ${join(dir, "state")}`);
  });

  it("models ls --node with an unknown node is exit 4 naming the known nodes", () => {
    const r = warden(["models", "ls", "--node", "nosuch", "--addr", addr]);
    expect(r.code).toBe(4);
    expect(r.stderr).toContain('no node "nosuch" is registered (known: local)');
  });

  it("unload of a configured model that is not loaded says so and exits 4", () => {
    const r = warden(["models", "unload", "b", "--addr", addr]);
    expect(r.code).toBe(4);
    expect(r.stderr).toContain("b is not loaded; nothing to unload");
  });

  it("a load whose only node drains waits loadWait, not the call's deadline, then exits 3 naming the reason", () => {
    expect(warden(["nodes", "drain", "local", "--addr", addr]).code).toBe(0);
    try {
      const r = warden(["predict", "a", "hi", "--addr", addr, "--timeout", "10m"]);
      expect(r.code, r.stderr).toBe(3);
      expect(r.stderr).toContain("no node fits: local: node is draining");
    } finally {
      expect(warden(["nodes", "undrain", "local", "--addr", addr]).code).toBe(0);
    }
  });

  it("policy set names the setting the operator typed", () => {
    const r = warden(["policy", "set", "memoryThreshold=2", "--addr", addr]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("memoryThreshold:");
    expect(r.stderr).not.toContain("memory_threshold");
  });

  it("placement reasons print sizes as the tables do", () => {
    expect(humanBytes("needs 6442450944 bytes, 1073741824 bytes free")).toBe("needs 6.0GiB, 1.0GiB free");
    expect(humanBytes("node is draining")).toBe("node is draining");
  });

  it("warden events says the coordinator went away when it shuts down (exit 3), not [canceled]", async () => {
    const ev = spawn(process.execPath, cli(["events", "--addr", addr]), { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    ev.stdout.on("data", (b: Buffer) => (out += b.toString()));
    ev.stderr.on("data", (b: Buffer) => (err += b.toString()));
    const exited = new Promise<number | null>((r) => ev.once("exit", r));
    // An event proves the stream is open before the coordinator goes.
    // Load and unload until one reaches it: the follower may subscribe after the first load.
    await until("an event on the stream", () => {
      if (out.includes("node=local")) return true;
      warden(["models", "load", "b", "--addr", addr]);
      warden(["models", "unload", "b", "--addr", addr]);
      return out.includes("node=local");
    }, 150_000);
    up?.kill("SIGINT");
    const code = await exited;
    expect(err).toContain(`the coordinator at ${addr} went away`);
    expect(err).not.toContain("[canceled]");
    expect(code).toBe(3);
  }, 180_000);
});
