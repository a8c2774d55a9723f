/**
 * `npm run bench`: runs every `*.bench.ts` under test/bench (or those named on
 * the command line) and prints one table. Each benchmark measures a baseline
 * in the same run and reports both sides and the ratio.
 *
 * Every benchmark file runs in a fresh Node process, so one file's heap,
 * JIT state and leftover timers never skew the next one's latency tail.
 */
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { advantage, type BenchResult } from "./bench-result.js";

const dir = import.meta.dirname;
const resultMarker = "@@bench-results@@";

async function runOne(file: string): Promise<void> {
  const mod = (await import(pathToFileURL(join(dir, file)).href)) as { run: () => Promise<BenchResult[]> };
  const results = await mod.run();
  process.stdout.write(`${resultMarker}${JSON.stringify(results)}\n`);
}

function runInChild(file: string, flags: readonly string[]): Promise<BenchResult[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(dir, "run.ts"), "--one", file, ...flags], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.on("error", reject);
    child.on("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith(resultMarker));
      if (code !== 0 || line === undefined) reject(new Error(`${file} exited with code ${String(code)}`));
      else resolve(JSON.parse(line.slice(resultMarker.length)) as BenchResult[]);
    });
  });
}

const args = process.argv.slice(2);
if (args[0] === "--one" && args[1] !== undefined) {
  await runOne(args[1]);
  process.exit(0);
}

// `--flag value` pairs are a bench's own options (`swarm --nodes 1000,5000`), passed to each file's process.
const flags = args.flatMap((a, i) => (a.startsWith("--") ? [a, args[i + 1] ?? ""] : []));
const names = args.filter((a, i) => !a.startsWith("--") && args[i - 1]?.startsWith("--") !== true);
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".bench.ts"))
  .filter((f) => names.length === 0 || names.some((o) => f.includes(o)))
  .sort();

const rows: Record<string, string>[] = [];
let failed = false;
for (const f of files) {
  process.stderr.write(`running ${f} …\n`);
  try {
    for (const r of await runInChild(f, flags)) {
      rows.push({
        bench: f.replace(".bench.ts", ""),
        name: r.name,
        ours: `${r.ours.toPrecision(4)} ${r.unit}`,
        baseline: `${r.baselineValue.toPrecision(4)} ${r.unit} (${r.baseline})`,
        ratio: `${advantage(r).toFixed(2)}x ${r.higherIsBetter ? "higher" : "lower"}`,
      });
    }
  } catch (err) {
    failed = true;
    process.stderr.write(`${f} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  }
}
console.table(rows);
if (failed) process.exitCode = 1;
