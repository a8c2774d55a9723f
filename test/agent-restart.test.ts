import { spawn } from "node:child_process";
import { readdir, rm, writeFile, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AgentService, BackendState, Health, HealthCheckResponse_ServingStatus } from "@warden/proto";
import { backendSimMainPath, repoRootPath } from "../services/agent/src/backend-sim-catalog.js";
import { agentMarkOf, markEnv } from "../services/agent/src/process-mark.js";
import { killLeftBehind, liveTaggedSims, newIncarnation, pidAlive, randomPortRange, simCatalog, startReady, tempDir, testTagVar, uniqueTag, waitFor } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";

// The agent as a real process: SIGTERM leaves backends running, the next agent
// adopts them from its state dir (pid + start time), forgets dead ones, keeps
// reporting stopRequested, and reports orphans in its port range.
const fileTag = uniqueTag("agent-restart");
const ports = randomPortRange(12);
const started: AgentProcess[] = [];
const strays: number[] = [];
let dir: string;
let stateDir: string;
let configPath: string;

async function agent(extra: string[] = []): Promise<{ proc: AgentProcess; client: Client<typeof AgentService> }> {
  const proc = await startAgentProcess(configPath, extra);
  started.push(proc);
  return { proc, client: createClient(AgentService, proc.address) };
}

beforeAll(async () => {
  dir = await tempDir("warden-agent-restart");
  stateDir = join(dir, "state");
  configPath = join(dir, "agent.yaml");
  await writeAgentConfig(configPath, {
    nodeId: "restart-node",
    labels: { zone: "test" },
    stateDir,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { sim: simCatalog(fileTag) },
    grace: "60s",
    freeTimeout: "1s",
    readiness: { attempts: 60, interval: "500ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    adoptedPoll: "100ms",
    orphanScanInterval: "200ms",
  });
});

afterAll(async () => {
  const leaked = await liveTaggedSims(fileTag);
  // hygiene after the check: never leave processes behind, even when it failed
  await killLeftBehind(started, [...leaked, ...strays]);
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

describe("agent restart", () => {
  it("adopts a live backend, forgets a dead one, keeps stopRequested and reports an orphan", async () => {
    const first = await agent();
    const health = createClient(Health, first.proc.address);
    expect((await health.check({ service: "warden.v1.AgentService" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    health.close();
    const a = await startReady(first.client, "keep-me");
    const b = await startReady(first.client, "dies-while-down");
    const c = await startReady(first.client, "stop-pending", ["sim.ignore_sigterm:true"]);
    // a stop whose caller gives up during the (60 s) grace: recorded, SIGTERM ignored
    const err = await first.client.stopBackend({ address: c.address, incarnation: c.incarnation, reason: "idle" }, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    first.client.close();
    expect(await first.proc.terminate()).toBe(0);
    // SIGTERM leaves every backend running
    for (const r of [a, b, c]) expect(await pidAlive(r.pid)).toBe(true);

    // while no agent runs: one backend dies, a process of this agent (its mark, no record) starts listening in the range
    process.kill(b.pid, "SIGKILL");
    await waitFor("b dead", async () => !(await pidAlive(b.pid)));
    const orphanPort = ports.max;
    const orphan = spawn(process.execPath, ["--import", "tsx", backendSimMainPath, "--addr", `127.0.0.1:${String(orphanPort)}`], {
      cwd: repoRootPath,
      detached: true,
      stdio: "ignore",
      env: { ...markEnv(agentMarkOf("restart-node", stateDir), ""), PATH: process.env.PATH, [testTagVar]: fileTag },
    });
    const orphanPid = orphan.pid ?? 0;
    strays.push(orphanPid);
    // a partial record naming it (no incarnation), and a record whose pid is alive but recycled (wrong start time)
    await writeFile(join(stateDir, "partial.json"), JSON.stringify({ pid: orphanPid, model: "ghost", address: `127.0.0.1:${String(orphanPort)}` }));
    const recycled = newIncarnation();
    await writeFile(
      join(stateDir, `${recycled}.json`),
      JSON.stringify({ version: 1, incarnation: recycled, model: "impostor", backend: "sim", address: `127.0.0.1:${String(ports.min)}`, pid: process.pid, pidStartTime: "1", gpuDevice: "", startedAtMs: 0, phase: "ready", stopRequested: null }),
    );
    await waitFor("orphan listening", async () => (await readFile("/proc/net/tcp", "utf8")).includes(`:${orphanPort.toString(16).toUpperCase().padStart(4, "0")} 00000000:0000 0A`));

    const second = await agent();
    const inv = await waitFor("orphan reported", async () => {
      const r = await second.client.listBackends({});
      return r.orphans.some((o) => o.pid === orphanPid) ? r : undefined;
    });
    const byInc = new Map(inv.backends.map((e) => [e.incarnation, e]));
    expect(byInc.get(a.incarnation)).toMatchObject({ pid: a.pid, state: BackendState.READY, address: a.address, model: "keep-me" });
    expect(byInc.get(a.incarnation)?.stopRequested).toBeUndefined();
    expect(byInc.has(b.incarnation)).toBe(false);
    expect(byInc.has(recycled)).toBe(false);
    expect(byInc.get(c.incarnation)?.pid).toBe(c.pid);
    expect(byInc.get(c.incarnation)?.stopRequested).toMatchObject({ incarnation: c.incarnation, reason: "idle" });
    const o = inv.orphans.find((x) => x.pid === orphanPid);
    expect(o).toMatchObject({ address: `127.0.0.1:${String(orphanPort)}`, model: "ghost" });
    expect(o?.memoryBytes).toBeGreaterThan(0n);
    const files = await readdir(stateDir);
    expect(files).not.toContain(`${b.incarnation}.json`);
    expect(files).not.toContain(`${recycled}.json`);
    expect(files).toContain(`${a.incarnation}.json`);

    // the adopted backends are stoppable through the new agent
    const sa = await second.client.stopBackend({ address: a.address, incarnation: a.incarnation, reason: "test" });
    expect(sa.outcome.case).toBe("stopped");
    expect(await pidAlive(a.pid)).toBe(false);
    const sc = await second.client.stopBackend({ address: c.address, incarnation: c.incarnation, force: true });
    expect(sc.outcome.case).toBe("stopped");
    expect(await pidAlive(c.pid)).toBe(false);
    second.client.close();
    expect(await second.proc.terminate()).toBe(0);

    process.kill(-orphanPid, "SIGKILL");
    await waitFor("orphan gone", async () => !(await pidAlive(orphanPid)));
  });

  it("with --stop-backends-on-exit calls Free (UNIMPLEMENTED tolerated) and stops its backends on SIGTERM", async () => {
    const log = join(dir, "exit-calls.log");
    const third = await agent(["--stop-backends-on-exit"]);
    const d = await startReady(third.client, "stop-on-exit", ["sim.free:unimplemented", `sim.call_log:${log}`]);
    third.client.close();
    expect(await third.proc.terminate()).toBe(0);
    expect(await pidAlive(d.pid)).toBe(false);
    const calls = (await readFile(log, "utf8")).split("\n");
    expect(calls.indexOf("Free")).toBeGreaterThan(-1);
    expect(calls.indexOf("SIGTERM")).toBeGreaterThan(calls.indexOf("Free"));
    expect((await readdir(stateDir)).filter((f) => f.endsWith(".json") && f !== "partial.json")).toEqual([]);
  });

  it("after a crash mid-start, the next agent stops the backend whose start nobody can finish", async () => {
    const crashing = await agent();
    const inc = newIncarnation();
    let pid = 0;
    const events: string[] = [];
    const stream = (async () => {
      for await (const ev of crashing.client.startBackend({ incarnation: inc, model: "half-loaded", backend: "sim", options: ["sim.load_delay_ms:600000"] }, { timeoutMs: 60_000 })) {
        events.push(ev.event.case ?? "");
        if (ev.event.case === "spawned") pid = ev.event.value.pid;
      }
    })().catch((e: unknown) => e);
    await waitFor("loading", () => events.includes("loading"));
    crashing.proc.child.kill("SIGKILL");
    await crashing.proc.exited;
    expect(await stream).toBeInstanceOf(Error);
    crashing.client.close();
    expect(await pidAlive(pid)).toBe(true);
    expect(await readdir(stateDir)).toContain(`${inc}.json`);
    const next = await agent();
    await waitFor("unfinished start stopped", async () => !(await pidAlive(pid)));
    await waitFor("its record removed", async () => !(await readdir(stateDir)).includes(`${inc}.json`));
    // listed at most as exited, never as a live backend
    const entry = (await next.client.listBackends({})).backends.find((b) => b.incarnation === inc);
    expect(entry === undefined || entry.state === BackendState.EXITED).toBe(true);
    next.client.close();
    expect(await next.proc.terminate()).toBe(0);
  });

  it("rejects a config with an unknown field, naming it", async () => {
    const bad = join(dir, "bad.yaml");
    await writeFile(bad, `nodeId: n\nstateDir: ${stateDir}\nports: {min: 1000, max: 1001}\ncatalog: {}\ngrace: 10s\ngarce: 5s\n`);
    const err = await startAgentProcess(bad, [], 20_000).catch((e: unknown) => e);
    expect(String(err)).toContain("garce: unknown field");
  });
});
