/**
 * Agent process control against bare child_process, same binary, same run:
 * - spawn→ready: StartBackend through the agent (spawn, record, readiness,
 *   LoadModel) vs `spawn` + polling Health until it answers;
 * - stop→reaped: graceful StopBackend (SIGTERM, reap, record removed) vs
 *   `kill(SIGTERM)` + waiting for the exit event.
 * Median of 20 each, interleaved so machine noise hits both sides alike.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cryptoRng, createUlidFactory, systemClock } from "@warden/common";
import { createClient } from "@warden/grpc";
import { Backend } from "@warden/proto";
import { backendSimCatalogEntry, createAgent, inProcessContext, resolveAgentConfig } from "@warden/agent";
import { median, type BenchResult } from "./bench-result.js";

const rounds = 20;
const pollMs = 25;

const sleepMs = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Baseline: spawn the same command line, poll Health every 25 ms until it answers; then SIGTERM and wait for exit. */
async function bareRound(port: number): Promise<{ readyMs: number; stopMs: number }> {
  const entry = backendSimCatalogEntry();
  const t0 = performance.now();
  const child = spawn(entry.command, [...entry.args, "--addr", `127.0.0.1:${String(port)}`], { cwd: entry.cwd, env: { PATH: process.env.PATH ?? "" }, detached: true, stdio: "ignore" });
  const exited = new Promise<void>((resolve) => child.once("exit", () => { resolve(); }));
  const client = createClient(Backend, `127.0.0.1:${String(port)}`, { channelOptions: { "grpc.initial_reconnect_backoff_ms": pollMs, "grpc.max_reconnect_backoff_ms": pollMs * 4, "grpc.use_local_subchannel_pool": 1 } });
  for (;;) {
    try {
      await client.health({}, { timeoutMs: 1_000 });
      break;
    } catch {
      await sleepMs(pollMs);
    }
  }
  const readyMs = performance.now() - t0;
  client.close();
  const t1 = performance.now();
  child.kill("SIGTERM");
  await exited;
  return { readyMs, stopMs: performance.now() - t1 };
}

export async function run(): Promise<BenchResult[]> {
  const dir = await mkdtemp(join(tmpdir(), "warden-agent-bench-"));
  const base = 20_000 + Math.floor(Math.random() * 39_000);
  const agent = createAgent(
    resolveAgentConfig({
      nodeId: "bench",
      stateDir: dir,
      ports: { min: base, max: base + 9, quarantine: "0s" },
      catalog: { sim: { ...backendSimCatalogEntry(), args: [...backendSimCatalogEntry().args], envAllow: ["PATH"] } },
      readiness: { attempts: 200, interval: "500ms", initialInterval: `${String(pollMs)}ms` },
      nvidiaSmi: "",
      orphanScanInterval: "1h",
    }),
  );
  await agent.start();
  const ulid = createUlidFactory(systemClock, cryptoRng);
  const ours = { ready: [] as number[], stop: [] as number[] };
  const bare = { ready: [] as number[], stop: [] as number[] };
  try {
    for (let i = 0; i < rounds; i++) {
      const incarnation = ulid();
      const t0 = performance.now();
      let address = "";
      for await (const ev of agent.service.startBackend(
        { $typeName: "warden.v1.StartBackendRequest", incarnation, model: "bench", backend: "sim", options: [], modelFile: "", contextSize: 0, gpuDevice: "", leaderEpoch: 0n, requestedBy: "", artifacts: [], loadDigest: "" },
        inProcessContext({ deadlineAtMs: Date.now() + 60_000 }),
      )) {
        if (ev.event?.case === "ready") address = ev.event.value.address ?? "";
        if (ev.event?.case === "failed") throw new Error(`start failed: ${ev.event.value.message ?? ""}`);
      }
      ours.ready.push(performance.now() - t0);
      const t1 = performance.now();
      const res = await agent.service.stopBackend({ $typeName: "warden.v1.StopBackendRequest", address, incarnation, force: false, reason: "bench", leaderEpoch: 0n, requestedBy: "" }, inProcessContext({ deadlineAtMs: Date.now() + 60_000 }));
      if (res.outcome?.case !== "stopped") throw new Error("stop did not report stopped");
      ours.stop.push(performance.now() - t1);

      const b = await bareRound(base + 10 + (i % 5));
      bare.ready.push(b.readyMs);
      bare.stop.push(b.stopMs);
    }
  } finally {
    await agent.close({ stopBackends: true });
    await rm(dir, { recursive: true, force: true });
  }
  return [
    { name: "backend-sim spawn→ready (median of 20)", baseline: "bare spawn + Health poll (no LoadModel)", ours: median(ours.ready), baselineValue: median(bare.ready), unit: "ms", higherIsBetter: false },
    { name: "backend-sim stop→reaped, graceful (median of 20)", baseline: "bare kill(SIGTERM) + exit event", ours: median(ours.stop), baselineValue: median(bare.stop), unit: "ms", higherIsBetter: false },
  ];
}
