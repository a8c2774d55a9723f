/**
 * `npm run bench`: runs every `*.bench.ts` under test/bench (or those named on
 * the command line) and prints one table. Each benchmark measures a baseline
 * in the same run and reports both sides and the ratio.
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { advantage, type BenchResult } from "./bench-result.js";

const dir = import.meta.dirname;
const only = process.argv.slice(2);
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".bench.ts"))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();

const rows: Record<string, string>[] = [];
let failed = false;
for (const f of files) {
  process.stderr.write(`running ${f} …\n`);
  try {
    const mod = (await import(pathToFileURL(join(dir, f)).href)) as { run: () => Promise<BenchResult[]> };
    for (const r of await mod.run()) {
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
