/**
 * The shipped `warden`: the ahead-of-time build (no TypeScript loader, a
 * stale build rebuilt before it runs) and the installable tarball, installed
 * offline into a fresh prefix and run there — `--version`, `agent --help`, and
 * a coordinator plus an agent that loads a backend-sim model, all from the
 * installed package with the repository out of reach.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wardenVersion } from "@warden/common";
import { until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";
import { testPortRange } from "./support/port-range.js";

const root = resolve(import.meta.dirname, "..");
const bin = join(root, "services", "cli", "bin", "warden.js");
const stampPath = join(root, "services", "cli", "dist", "build-stamp.json");
// Neither a TypeScript loader nor the repository's modules may reach the built or installed CLI.
const cleanEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
  delete env.NODE_OPTIONS;
  delete env.NODE_PATH;
  delete env.WARDEN_ADDR;
  return env;
};

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], cwd = root): Run {
  const r = spawnSync(cmd, args, { cwd, env: cleanEnv(), encoding: "utf8", timeout: 180_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

interface Stamp {
  node: string;
  inputs: Record<string, { size: number; mtimeMs: number; sha1: string }>;
}

describe("the built warden", () => {
  beforeAll(async () => {
    // `npm test` builds first; a bare vitest run may find the dist older than the sources.
    const { ensureFreshBuild } = (await import(join(root, "services", "cli", "build", "fresh.mjs"))) as { ensureFreshBuild: (o: { quiet: boolean }) => Promise<void> };
    await ensureFreshBuild({ quiet: true });
  });

  it("runs from the bundle without a TypeScript loader and prints its version", () => {
    const r = run(process.execPath, [bin, "--version"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(wardenVersion);
    const entry = readFileSync(join(root, "services", "cli", "dist", "warden.js"), "utf8");
    expect(entry).not.toMatch(/tsx\/esm|--import tsx/);
    const help = run(process.execPath, [bin, "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("Usage: warden");
  });

  it("a runner's error keeps its code across the bundle's two module copies (bad --config is exit 2, one code in the line)", () => {
    // The CommonJS front and the ES-module runners each carry @warden/common: an error thrown by one must be a WardenError to the other.
    const r = run(process.execPath, [bin, "up", "--config", join(root, "no-such-warden-config.yaml")]);
    expect(r.stderr).toMatch(/^warden: \[invalid_argument\] --config: cannot read /);
    expect(r.stderr).not.toContain("[unknown]");
    expect(r.code).toBe(2);
  });

  it("rebuilds before running when a recorded source differs, and only re-stamps when only its mtime moved", async () => {
    const original = readFileSync(stampPath, "utf8");
    const stamp = JSON.parse(original) as Stamp;
    const key = "services/cli/src/program.ts";
    const was = stamp.inputs[key];
    expect(was).toBeDefined();
    try {
      // Same content, another mtime (a git checkout does this): no rebuild, the stamp takes the new mtime.
      writeFileSync(stampPath, JSON.stringify({ ...stamp, inputs: { ...stamp.inputs, [key]: { ...was!, mtimeMs: was!.mtimeMs - 1000 } } }));
      const same = run(process.execPath, [bin, "--version"]);
      expect(same.code).toBe(0);
      expect(same.stderr).not.toContain("rebuilt");
      expect((JSON.parse(readFileSync(stampPath, "utf8")) as Stamp).inputs[key]?.mtimeMs).toBe(was!.mtimeMs);

      // Different content than the build saw: the bin rebuilds first and says why.
      writeFileSync(stampPath, JSON.stringify({ ...stamp, inputs: { ...stamp.inputs, [key]: { ...was!, mtimeMs: 1, sha1: "0".repeat(40) } } }));
      const stale = run(process.execPath, [bin, "--version"]);
      expect(stale.code).toBe(0);
      expect(stale.stderr).toContain("rebuilt services/cli/dist");
      expect(stale.stderr).toContain(key);
      expect(stale.stdout.trim()).toBe(wardenVersion);
      expect((JSON.parse(readFileSync(stampPath, "utf8")) as Stamp).inputs[key]?.sha1).toBe(was!.sha1);
    } finally {
      // The rebuild rewrote an equivalent stamp; make sure no test leaves a forged one behind.
      const now = JSON.parse(readFileSync(stampPath, "utf8")) as Stamp;
      if (now.inputs[key]?.sha1 !== was!.sha1) writeFileSync(stampPath, original);
    }
  });
});

/** Lines of a child's output, for waiting on what it printed. */
function capture(p: ChildProcess): { text: () => string } {
  let out = "";
  p.stdout?.on("data", (b: Buffer) => (out += b.toString()));
  p.stderr?.on("data", (b: Buffer) => (out += b.toString()));
  return { text: () => out };
}

function stopped(p: ChildProcess): Promise<void> {
  return new Promise((r) => {
    if (p.exitCode !== null || p.signalCode !== null) r();
    else
      p.once("exit", () => {
        r();
      });
  });
}

describe("the installable tarball", () => {
  it("installs offline into a fresh prefix and runs --version, agent --help, and a coordinator with an agent from there", async () => {
    const work = await mkdtemp(join(tmpdir(), "warden-tgz-"));
    cleanups.push(() => rm(work, { recursive: true, force: true }));
    const { packWarden } = (await import(join(root, "services", "cli", "build", "pack.mjs"))) as { packWarden: (out: string) => Promise<string> };
    const tgz = await packWarden(work);
    expect(tgz).toBe(join(work, `warden-${wardenVersion}.tgz`));

    const prefix = join(work, "prefix");
    const install = run("npm", ["install", "-g", "--offline", "--no-audit", "--no-fund", "--prefix", prefix, tgz], work);
    expect(install.stderr).not.toMatch(/EBADENGINE|ERR!/);
    expect(install.code).toBe(0);
    const warden = join(prefix, "bin", "warden");
    const pkgDir = join(prefix, "lib", "node_modules", "warden");
    const manifest = JSON.parse(await readFile(join(pkgDir, "package.json"), "utf8")) as { dependencies?: unknown };
    expect(manifest.dependencies).toBeUndefined();

    const version = run(warden, ["--version"], work);
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toBe(wardenVersion);
    const agentHelp = run(warden, ["agent", "--help"], work);
    expect(agentHelp.code).toBe(0);
    expect(agentHelp.stdout).toContain("--coordinator <host:port[,host:port…]>");

    const addr = `127.0.0.1:${String(await freePort())}`;
    const ports = testPortRange(20);
    await writeFile(
      join(work, "coordinator.yaml"),
      `listen: ${addr}\nstateDir: ${join(work, "coord")}\nembeddedAgent: false\nrecoveryWindow: 200ms\nmodels:\n  - id: sim\n    backend: backend-sim\n    options: ["sim.predict_tokens:3"]\n`,
    );
    await writeFile(
      join(work, "agent.yaml"),
      `nodeId: tgz-node\nlisten: 127.0.0.1:0\nstateDir: ${join(work, "agent")}\nports: { min: ${String(ports.min)}, max: ${String(ports.max)} }\nnvidiaSmi: ""\ncatalog:\n  backend-sim: { builtin: backend-sim }\n`,
    );
    expect(run(warden, ["coordinator", "--check-config", "--config", join(work, "coordinator.yaml")], work).code).toBe(0);
    expect(run(warden, ["agent", "--check-config", "--config", join(work, "agent.yaml")], work).code).toBe(0);

    const coord = spawn(warden, ["coordinator", "--config", join(work, "coordinator.yaml"), "--log-json"], { cwd: work, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
    const coordOut = capture(coord);
    cleanups.push(async () => {
      coord.kill("SIGKILL");
      await stopped(coord);
    });
    await until("the installed coordinator's banner", () => coordOut.text().includes("Warden is running"), 60_000);
    const agent = spawn(warden, ["agent", "--config", join(work, "agent.yaml"), "--coordinator", addr, "--stop-backends-on-exit"], { cwd: work, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
    capture(agent);
    cleanups.push(async () => {
      agent.kill("SIGKILL");
      await stopped(agent);
    });

    const nodes = await until(
      "the agent registered with its version",
      () => {
        const r = run(warden, ["nodes", "ls", "--json", "--addr", addr], work);
        // READY once its first inventory is in (NOT_REPORTED for the heartbeat before).
        return r.code === 0 && r.stdout.includes("tgz-node") && r.stdout.includes(`"version": "${wardenVersion}"`) && r.stdout.includes('"state": "NODE_STATE_READY"') ? r.stdout : undefined;
      },
      60_000,
    );
    expect(nodes).toContain('"state": "NODE_STATE_READY"');

    const predict = run(warden, ["predict", "sim", "hello", "--addr", addr], work);
    expect(predict.stderr).not.toContain("warden:");
    expect(predict.code).toBe(0);
    expect(predict.stdout).toMatch(/w0 w1 w2/);
    // The backend the agent started is the package's own backend-sim, not the repository's.
    const simPath = join(pkgDir, "dist", "backend-sim.js");
    const sims = readdirSync("/proc")
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          return readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0").includes(simPath);
        } catch {
          return false;
        }
      });
    expect(sims).toHaveLength(1);

    agent.kill("SIGTERM");
    await stopped(agent);
    expect(agent.exitCode).toBe(0);
    coord.kill("SIGTERM");
    await stopped(coord);
    expect(coord.exitCode).toBe(0);
  });
});
