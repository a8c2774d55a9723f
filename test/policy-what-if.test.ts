/**
 * Policy what-if: synthesised traces are deterministic, a replay through the
 * production decision code gives known counts on a small trace, a sweep
 * prints its grid and Pareto front, and a candidate config that would not
 * load is refused naming the field. The commands run as their own process
 * from the sources, as the other CLI tests do.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveCoordinatorConfig } from "@warden/coordinator";
import { replayInput, replayTrace, synthTrace, traceHeader, type ReplayConfig, type TraceLine } from "@warden/whatif";
import { pareto, parseSweep } from "../services/cli/src/whatif.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const t0 = 1_750_000_000_000;
const min = 60_000;
const models = "models:\n  - { id: m, backend: llama-cpp, modelFile: m.gguf, memoryEstimate: 4GiB }\n";
const config = (idleTimeout: string): ReplayConfig => resolveCoordinatorConfig({ policy: { idleCheck: true, idleTimeout }, models: [{ id: "m", backend: "llama-cpp", modelFile: "m.gguf", memoryEstimate: "4GiB" }] });

/** One 24 GiB node; one 1 s call to `m` every 5 minutes, five in all; loads recorded at 20 s. */
function fiveCalls(): TraceLine[] {
  const lines: TraceLine[] = [
    { t: "node", at: t0, node: "gpu-1", ev: "joined" },
    { t: "mem", at: t0, node: "gpu-1", totalBytes: 24 * 1024 ** 3, usedBytes: 0 },
    { t: "load", at: t0, m: "m", node: "gpu-1", loadMs: 20_000 },
  ];
  for (let i = 0; i < 5; i++) lines.push({ t: "call", at: t0 + i * 5 * min, m: "m", waitMs: 0, durMs: 1_000, ok: true });
  return lines;
}

/** Two models on one node: `a` (4 GiB) at 0 and 6 minutes, `b` (2 GiB) at 3 minutes: under 15m both are held at 3 minutes, under 1m `a` is gone by then. */
function twoModels(): TraceLine[] {
  return [
    { t: "node", at: t0, node: "gpu-1", ev: "joined" },
    { t: "mem", at: t0, node: "gpu-1", totalBytes: 24 * 1024 ** 3, usedBytes: 0 },
    { t: "call", at: t0, m: "a", waitMs: 0, durMs: 1_000, ok: true },
    { t: "call", at: t0 + 3 * min, m: "b", waitMs: 0, durMs: 1_000, ok: true },
    { t: "call", at: t0 + 6 * min, m: "a", waitMs: 0, durMs: 1_000, ok: true },
  ];
}
const twoModelsYaml = "models:\n  - { id: a, backend: llama-cpp, modelFile: a.gguf, memoryEstimate: 4GiB }\n  - { id: b, backend: llama-cpp, modelFile: b.gguf, memoryEstimate: 2GiB }\n";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-whatif-"));
  await writeFile(join(dir, "five.jsonl"), [traceHeader("test", t0), ...fiveCalls()].map((l) => JSON.stringify(l)).join("\n") + "\n");
  await writeFile(join(dir, "idle-1m.yaml"), `policy: { idleCheck: true, idleTimeout: 1m }\n${models}`);
  await writeFile(join(dir, "idle-15m.yaml"), `policy: { idleCheck: true, idleTimeout: 15m }\n${models}`);
  await writeFile(join(dir, "two.jsonl"), [traceHeader("test", t0), ...twoModels()].map((l) => JSON.stringify(l)).join("\n") + "\n");
  await writeFile(join(dir, "two-1m.yaml"), `policy: { idleCheck: true, idleTimeout: 1m }\n${twoModelsYaml}`);
  await writeFile(join(dir, "two-15m.yaml"), `policy: { idleCheck: true, idleTimeout: 15m }\n${twoModelsYaml}`);
  const gap: TraceLine = { t: "gap", at: t0 + 7 * min, lastAt: t0 + 7 * min + 500, dropped: 15 };
  await writeFile(join(dir, "gap.jsonl"), [traceHeader("test", t0), ...fiveCalls(), gap].map((l) => JSON.stringify(l)).join("\n") + "\n");
  await writeFile(join(dir, "bad.yaml"), `policy: { idleCheck: true, idleTimeout: 5 minutes }\n${models}`);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("policy what-if", () => {
  it("synth: the same flags give the same trace; another seed another one", () => {
    const opts = { models: [{ model: "a", ratePerSec: 0.5, meanDurationMs: 2_000 }, { model: "b", ratePerSec: 0.1, meanDurationMs: 500 }], nodes: 2, nodeBytes: 1024 ** 3, hours: 1 };
    const one = [...synthTrace({ ...opts, seed: 7 })];
    const two = [...synthTrace({ ...opts, seed: 7 })];
    const other = [...synthTrace({ ...opts, seed: 8 })];
    expect(two).toEqual(one);
    expect(other).not.toEqual(one);
    const calls = one.filter((l) => "t" in l && l.t === "call");
    // About 0.6 calls a second for an hour (Poisson: well within ±20%).
    expect(calls.length).toBeGreaterThan(0.6 * 3600 * 0.8);
    expect(calls.length).toBeLessThan(0.6 * 3600 * 1.2);
    // In time order.
    expect(calls.every((c, i) => i === 0 || c.at >= (calls[i - 1]?.at ?? 0))).toBe(true);
    const cli = warden(["trace", "synth", "--model", "a=0.5/s,2s", "--model", "b=0.1/s,500ms", "--nodes", "2", "--gib", "1", "--hours", "1", "--seed", "7"]);
    expect(cli.code).toBe(0);
    expect(cli.stdout).toBe(one.map((l) => JSON.stringify(l)).join("\n") + "\n");
  });

  it("replay: a call every 5 minutes is a cold start each time under a 1 min idle timeout (4 idle evictions), once under 15 min", async () => {
    const input = replayInput(fiveCalls());
    const short = await replayTrace(input, config("1m"));
    expect(short.calls).toBe(5);
    expect(short.coldStarts).toBe(5);
    expect(short.callsWaited).toBe(5);
    expect(short.waitP50Ms).toBe(20_000);
    expect(short.evictionsByReason).toEqual({ idle: 4 });
    expect(short.failedCalls).toBe(0);
    const long = await replayTrace(input, config("15m"));
    expect(long.coldStarts).toBe(1);
    expect(long.callsWaited).toBe(1);
    expect(long.evictionsByReason).toEqual({});
    // The instance was held idle far longer under 15 min: between calls and after the last one.
    expect(long.idleInstanceHours).toBeGreaterThan(short.idleInstanceHours);
    expect(long.nodes).toEqual([expect.objectContaining({ nodeId: "gpu-1", peakBytes: 4 * 1024 ** 3 })]);
  });

  it("simulate prints both sides and the top changes in words", () => {
    const r = warden(["policy", "simulate", "--trace", join(dir, "five.jsonl"), "--policy", join(dir, "idle-15m.yaml"), "--against", join(dir, "idle-1m.yaml")]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/cold starts\s+5\s+1\n/);
    expect(r.stdout).toMatch(/evictions: idle\s+4\s+0\n/);
    // No gap in the trace, no warning.
    expect(r.stdout).not.toContain("warning:");
    expect(r.stdout).toContain("m: 5 cold starts → 1");
    expect(r.stdout).toContain("idle evictions: 4 → 0");
    // The trace's one node event (gpu-1 joined) replayed at its time.
    expect(r.stdout).toMatch(/; 1 recorded node events and operator changes replayed\n$/);
    // Without --against the left column is what the trace recorded (one load).
    const rec = warden(["policy", "simulate", "--trace", join(dir, "five.jsonl"), "--policy", join(dir, "idle-1m.yaml"), "--json"]);
    expect(rec.code).toBe(0);
    const j = JSON.parse(rec.stdout) as { recorded: { coldStarts: number }; candidate: { coldStarts: number } };
    expect(j.recorded.coldStarts).toBe(1);
    expect(j.candidate.coldStarts).toBe(5);
  });

  it("top changes name a node's peak memory change and the model whose loads made it", () => {
    const r = warden(["policy", "simulate", "--trace", join(dir, "two.jsonl"), "--policy", join(dir, "two-15m.yaml"), "--against", join(dir, "two-1m.yaml")]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/gpu-1 memory peak \/ mean\s+4\.0GiB \/ [0-9.]+GiB\s+6\.0GiB \/ /);
    const changes = r.stdout.split("top changes:\n")[1] ?? "";
    expect(changes).toContain("  a: 2 cold starts → 1\n");
    // b's load came while a was still held under 15m: the peak grew by b's 2 GiB.
    expect(changes).toContain("  b: +2.0 GiB peak on gpu-1\n");
  });

  it("--help says what the replay models: node loss and the timeline are replayed, per-GPU placement is not", () => {
    const r = warden(["policy", "simulate", "--help"]);
    expect(r.code).toBe(0);
    const help = r.stdout.replace(/\s+/g, " ");
    expect(help).toContain("node joins, losses (what the node ran is lost) and drains");
    const notModelled = help.split("Not modelled:")[1] ?? "";
    expect(notModelled).not.toMatch(/node loss\b/);
    expect(notModelled).toContain("per-GPU placement (each node is one memory pool)");
  });

  it("a trace with a gap (lines its recorder dropped) is replayed with a warning saying where and how many", () => {
    const r = warden(["policy", "simulate", "--trace", join(dir, "gap.jsonl"), "--policy", join(dir, "idle-15m.yaml"), "--against", join(dir, "idle-1m.yaml")]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const from = new Date(t0 + 7 * min).toISOString();
    const to = new Date(t0 + 7 * min + 500).toISOString();
    expect(r.stdout.startsWith(`warning: the trace has 1 gap: its recorder dropped 15 lines (buffer full or a failed write) between ${from} and ${to};`)).toBe(true);
    // The counts are the same as without the gap line: what it lost is not made up.
    expect(r.stdout).toMatch(/cold starts\s+5\s+1\n/);
    const j = JSON.parse(warden(["policy", "simulate", "--trace", join(dir, "gap.jsonl"), "--policy", join(dir, "idle-1m.yaml"), "--json"]).stdout) as { traceGaps: unknown };
    expect(j.traceGaps).toEqual({ gaps: 1, droppedLines: 15 });
  });

  it("sweep: every grid point, and the Pareto front of cold starts vs idle GPU-hours", () => {
    expect(parseSweep(["idleTimeout=1m,5m,15m", "limitPerNode=2,3"]).map((a) => a.values.length)).toEqual([3, 2]);
    const r = warden(["policy", "simulate", "--trace", join(dir, "five.jsonl"), "--policy", join(dir, "idle-1m.yaml"), "--sweep", "idleTimeout=1m,3m,15m", "--sweep", "limitPerNode=1,2"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const rows = r.stdout.split("\n").filter((l) => l.startsWith("idleTimeout="));
    expect(rows).toHaveLength(6);
    // 15m keeps the instance between calls (1 cold start); 1m and 3m both evict between calls
    // (5 cold starts), 3m after holding it idle longer: 3m is off the front, whatever limitPerNode.
    const front = r.stdout.split("Pareto front")[1] ?? "";
    expect(front).toMatch(/\n {2}idleTimeout=15m limitPerNode=1: 1 cold starts/);
    expect(front).toMatch(/\n {2}idleTimeout=1m limitPerNode=1: 5 cold starts/);
    expect(front).not.toContain("idleTimeout=3m");
  });

  it("pareto keeps exactly the points no other beats on both axes", () => {
    const p = (cold: number, idle: number): { report: { coldStarts: number; idleInstanceHours: number } } => ({ report: { coldStarts: cold, idleInstanceHours: idle } });
    const a = p(5, 1);
    const b = p(1, 3);
    const c = p(5, 2);
    const d = p(1, 3);
    expect(pareto([a, b, c, d] as never[])).toEqual([a, b, d]);
  });

  it("a candidate that would not load is refused naming the field (exit 2); so is a bad sweep", () => {
    const r = warden(["policy", "simulate", "--trace", join(dir, "five.jsonl"), "--policy", join(dir, "bad.yaml")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${join(dir, "bad.yaml")} would not load: policy.idleTimeout:`);
    const sweep = warden(["policy", "simulate", "--trace", join(dir, "five.jsonl"), "--policy", join(dir, "idle-1m.yaml"), "--sweep", "idleTimeout=1m,soon"]);
    expect(sweep.code).toBe(2);
    expect(sweep.stderr).toContain("with idleTimeout=soon would not load: policy.idleTimeout:");
    const unknown = warden(["policy", "simulate", "--trace", join(dir, "five.jsonl"), "--policy", join(dir, "idle-1m.yaml"), "--sweep", "idleTimeoutt=1m"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("policy.idleTimeoutt: unknown field");
  });
});
