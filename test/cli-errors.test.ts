/**
 * What a new user's typos get: one line naming the flag or field, and an exit
 * code that means it (2 for bad input), never a raw Node error or a hang.
 * Each command runs as its own process (from the sources, as the other CLI
 * tests do), and `--check-config` validates without starting anything.
 */
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wardenVersion } from "@warden/common";
import { testPortRange } from "./support/port-range.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 90_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-cli-errors-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("warden: bad input is exit 2 naming what to fix", () => {
  it("a missing --config file, and a directory given as --config", () => {
    const missing = warden(["up", "--config", join(dir, "nope.yaml")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`--config: cannot read ${join(dir, "nope.yaml")}: no such file`);
    expect(missing.stderr).not.toContain("ENOENT");
    const isDir = warden(["coordinator", "--config", dir]);
    expect(isDir.code).toBe(2);
    expect(isDir.stderr).toContain(`cannot read ${dir}: is a directory`);
  });

  it("--metrics without a numeric port, --log-level that is no level, --listen out of range", () => {
    const metrics = warden(["up", "--metrics", "127.0.0.1:abc", "--state-dir", join(dir, "s1")]);
    expect(metrics.code).toBe(2);
    expect(metrics.stderr).toContain("--metrics:");
    const level = warden(["up", "--log-level", "loud", "--state-dir", join(dir, "s1")]);
    expect(level.code).toBe(2);
    expect(level.stderr).toContain('--log-level: expected one of trace, debug, info, warn, error, fatal, silent, got "loud"');
    const listen = warden(["up", "--listen", "127.0.0.1:70000", "--state-dir", join(dir, "s1")]);
    expect(listen.code).toBe(2);
    expect(listen.stderr).toContain("--listen: port 70000 is out of range");
  });

  it("--addr with a port out of range or with a scheme", () => {
    const range = warden(["models", "ls", "--addr", "127.0.0.1:99999"]);
    expect(range.code).toBe(2);
    expect(range.stderr).toContain("--addr: port 99999 is out of range");
    const url = warden(["nodes", "ls", "--addr", "http://127.0.0.1:50051"]);
    expect(url.code).toBe(2);
    expect(url.stderr).toContain('try "127.0.0.1:50051"');
    const twice = warden(["models", "ls", "--addr", "127.0.0.1:50051,127.0.0.1:50051"]);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('--addr: "127.0.0.1:50051" is listed twice');
    const badSecond = warden(["predict", "m", "hi", "--addr", "127.0.0.1:50051,127.0.0.1:99999"]);
    expect(badSecond.code).toBe(2);
    expect(badSecond.stderr).toContain("--addr: port 99999 is out of range");
  });

  it("a state dir that cannot be created fails at once instead of hanging", () => {
    const r = warden(["up", "--state-dir", "/proc/nope/warden", "--listen", "127.0.0.1:0"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--state-dir: cannot create /proc/nope/warden");
  });

  it("a listen address already in use is 'cannot listen' (exit 7), not 'Warden unreachable' (exit 3)", async () => {
    const taken: Server = createServer();
    const port = await new Promise<number>((r) => {
      taken.listen(0, "127.0.0.1", () => {
        const a = taken.address();
        r(typeof a === "object" && a !== null ? a.port : 0);
      });
    });
    try {
      const r = warden(["up", "--listen", `127.0.0.1:${String(port)}`, "--state-dir", join(dir, "s2"), "--log-level", "warn"]);
      expect(r.stderr).toContain(`cannot listen on 127.0.0.1:${String(port)}: address already in use`);
      // One message for one problem: grpc-js's own "E No address added out of total 1 resolved" is not printed before it.
      expect(r.stderr.split("\n").filter((l) => l.trim() !== "")).toEqual([expect.stringContaining("cannot listen on")]);
      expect(r.code).toBe(7);
    } finally {
      taken.close();
    }
  });
});

describe("--check-config validates without starting", () => {
  it("coordinator: prints the effective settings, the real policy defaults included", async () => {
    const f = join(dir, "ok.yaml");
    await writeFile(f, `listen: 127.0.0.1:1\nstateDir: ${join(dir, "never")}\nmodels:\n  - { id: m, backend: backend-sim }\n`);
    const r = warden(["coordinator", "--check-config", "--config", f]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`config ${f}: valid`);
    // With no policy: block every check is off and the limit is unlimited.
    expect(r.stdout).toContain("policy         limitPerNode=unlimited idleCheck=off busyCheck=off memoryReclaimer=off");
    expect(r.stdout).toContain("m (backend-sim)");
    expect(r.stdout).toContain("http           off");
  });

  it("coordinator: an operator settings file in the state dir that cannot be read is invalid (exit 2), naming the file", async () => {
    const stateDir = join(dir, "settings-state");
    await mkdir(stateDir, { recursive: true });
    await writeFile(join(stateDir, "operator-settings.json"), "{ not json");
    const f = join(dir, "settings.yaml");
    await writeFile(f, `listen: 127.0.0.1:1\nstateDir: ${stateDir}\nmodels:\n  - { id: m, backend: backend-sim }\n`);
    const r = warden(["coordinator", "--check-config", "--config", f]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`stateDir: the operator settings file ${join(stateDir, "operator-settings.json")} is not readable: not JSON`);
  });

  it("up: the OpenAI HTTP API at 127.0.0.1:8080 by default, the config's wins over the default, --http off over both", async () => {
    expect(warden(["up", "--check-config"]).stdout).toContain("http           127.0.0.1:8080");
    const f = join(dir, "http.yaml");
    await writeFile(f, `httpListen: 127.0.0.1:18080\nmodels:\n  - { id: m, backend: backend-sim }\n`);
    expect(warden(["up", "--check-config", "--config", f]).stdout).toContain("http           127.0.0.1:18080");
    expect(warden(["up", "--check-config", "--config", f, "--http", "off"]).stdout).toContain("http           off");
  });

  it("coordinator: a model whose backend is in no catalog of the embedded agent is refused, naming the field", async () => {
    const f = join(dir, "nobackend.yaml");
    await writeFile(f, `models:\n  - { id: a, backend: backend-sim }\n  - { id: b, backend: llama-cpp }\n`);
    const r = warden(["coordinator", "--check-config", "--config", f]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`models[1].backend: "llama-cpp" is not in the embedded agent's catalog (agent.catalog has backend-sim)`);
    const up = warden(["up", "--config", f, "--state-dir", join(dir, "s3")]);
    expect(up.code).toBe(2);
    expect(up.stderr).toContain("models[1].backend");
  });

  it("agent: valid prints the node's settings; invalid names the field", async () => {
    const ports = testPortRange(4);
    const ok = join(dir, "agent.yaml");
    await writeFile(ok, `nodeId: n1\nstateDir: ${join(dir, "agent-state")}\nports: { min: ${String(ports.min)}, max: ${String(ports.max)} }\nnvidiaSmi: ""\ncatalog:\n  backend-sim: { builtin: backend-sim }\n`);
    const r = warden(["agent", "--check-config", "--config", ok]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`config ${ok}: valid`);
    expect(r.stdout).toContain("nodeId      n1");
    const bad = join(dir, "agent-bad.yaml");
    await writeFile(bad, `nodeId: n1\nstateDir: /tmp/x\nports: { min: 10, max: 5 }\ncatalog: {}\n`);
    const b = warden(["agent", "--check-config", "--config", bad]);
    expect(b.code).toBe(2);
    expect(b.stderr).toContain("ports.max");
  });

  it("warden --version prints the release version", () => {
    const r = warden(["--version"]);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(wardenVersion);
  });
});
