/**
 * `node --import tsx test/sim/run/trace-hashes.ts [--from 1] [--to 300] [--long] [--unchanged differential|skip|full]`:
 * prints `seed hash steps violations` per seed, to check that a harness change
 * leaves existing seeds' traces byte-identical (diff the output of two commits),
 * or that the skip of unchanged heartbeats decides as the full reconcile does
 * (diff `--unchanged skip` against `--unchanged full`: SimOptions.unchangedHeartbeats).
 */
import { runSeed } from "./run-seed.js";
import type { SimProfile } from "./sim-options.js";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? undefined : process.argv[i + 1];
}

const from = Number(arg("from") ?? "1");
const to = Number(arg("to") ?? "300");
const profile: SimProfile = process.argv.includes("--long") ? "long" : "short";
const unchanged = arg("unchanged");
if (unchanged !== undefined && unchanged !== "differential" && unchanged !== "skip" && unchanged !== "full") throw new Error(`--unchanged: differential, skip or full, not "${unchanged}"`);
for (let seed = from; seed <= to; seed++) {
  const r = await runSeed(seed, { profile, ...(unchanged === undefined ? {} : { overrides: { unchangedHeartbeats: unchanged } }) });
  console.log(`${String(seed)} ${r.traceHash.toString(16)} ${String(r.steps)} ${String(r.violations.length)}`);
}
