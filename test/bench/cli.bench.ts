/**
 * CLI latency: wall time of `warden --help`, `warden models ls --json` and
 * `warden nodes ls` (each a fresh process, as an operator types it) against a
 * running coordinator — the built CLI (services/cli/bin/warden.js → dist)
 * against the TypeScript sources through tsx (how `warden` ran before the
 * build), interleaved round by round in the same run so machine load hits
 * both sides alike. Medians, with the 10th–90th percentile spread on stderr.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { median, type BenchResult } from "./bench-result.js";
import { freePort } from "../support/free-port.js";

const root = resolve(import.meta.dirname, "..", "..");
const built = [join(root, "services", "cli", "bin", "warden.js")];
const viaTsx = ["--import", "tsx", join(root, "services", "cli", "src", "main.ts")];
const rounds = Number(process.env.CLI_BENCH_ROUNDS ?? "15");

function wallMs(args: string[]): number {
  const t = performance.now();
  const r = spawnSync(process.execPath, args, { cwd: root, stdio: ["ignore", "ignore", "pipe"], encoding: "utf8" });
  const ms = performance.now() - t;
  if (r.status !== 0) throw new Error(`${args.join(" ")} exited ${String(r.status)}: ${r.stderr}`);
  return ms;
}

function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.round((p / 100) * (s.length - 1))))] ?? 0;
}

export async function run(): Promise<BenchResult[]> {
  const { ensureFreshBuild } = (await import(pathToFileURL(join(root, "services", "cli", "build", "fresh.mjs")).href)) as { ensureFreshBuild: () => Promise<void> };
  await ensureFreshBuild();
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-cli-"));
  const addr = `127.0.0.1:${String(await freePort())}`;
  const up = spawn(process.execPath, [...built, "up", "--listen", addr, "--state-dir", join(dir, "state"), "--log-level", "warn", "--log-json", "--http", "off"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  up.stdout.on("data", (b: Buffer) => (out += b.toString()));
  // The banner comes on stderr under JSON logs; warnings pass through to the bench's stderr as before.
  up.stderr.on("data", (b: Buffer) => {
    const seen = out.includes("Warden is running");
    out += b.toString();
    if (seen) process.stderr.write(b);
  });
  for (let i = 0; i < 600 && !out.includes("Warden is running"); i++) await new Promise((r) => setTimeout(r, 100));
  try {
    const commands: { name: string; args: string[] }[] = [
      { name: "warden --help", args: ["--help"] },
      { name: "warden models ls --json", args: ["models", "ls", "--json", "--addr", addr] },
      { name: "warden nodes ls", args: ["nodes", "ls", "--addr", addr] },
    ];
    // One warm-up each: the page cache and tsx's transform cache, as for an operator's second command.
    for (const c of commands) {
      wallMs([...built, ...c.args]);
      wallMs([...viaTsx, ...c.args]);
    }
    const results: BenchResult[] = [];
    for (const c of commands) {
      const ours: number[] = [];
      const base: number[] = [];
      for (let i = 0; i < rounds; i++) {
        ours.push(wallMs([...built, ...c.args]));
        base.push(wallMs([...viaTsx, ...c.args]));
      }
      const o = median(ours);
      const b = median(base);
      process.stderr.write(
        `${c.name}: built median ${o.toFixed(0)} ms (p10–p90 ${percentile(ours, 10).toFixed(0)}–${percentile(ours, 90).toFixed(0)}), ` +
          `tsx median ${b.toFixed(0)} ms (p10–p90 ${percentile(base, 10).toFixed(0)}–${percentile(base, 90).toFixed(0)}), ${(b / o).toFixed(2)}× faster, ${String(rounds)} rounds\n`,
      );
      results.push({ name: `${c.name} (wall, median of ${String(rounds)})`, baseline: "the same CLI through tsx", ours: o, baselineValue: b, unit: "ms", higherIsBetter: false });
    }
    return results;
  } finally {
    up.kill("SIGINT");
    await new Promise((r) => up.once("exit", r));
    await rm(dir, { recursive: true, force: true });
  }
}
