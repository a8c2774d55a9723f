/**
 * Reading a tokens file of 65 536 node tokens (the bound; one per node of a
 * 10 000-node coordinator and more) in their longest form — 128-character
 * node ids, 64-character names, 18 MB — as the coordinator does at start and
 * on SIGHUP (readTokenTable: the parse gives the event loop a turn every
 * 1 024 lines), against the same parse in one go (TokenTable.parse), in the
 * same run. Rows: the longest the event loop waited while the file was read
 * (a setImmediate chain's longest gap), and the whole read's wall time.
 * Median of 5 interleaved rounds.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TokenTable, tokenFileLimits } from "../../services/coordinator/src/auth/token-table.js";
import { readTokenTable } from "../../services/coordinator/src/auth/coordinator-auth.js";
import { median, type BenchResult } from "./bench-result.js";

/** Runs `load` while a setImmediate chain ticks: its wall time and the longest gap between ticks. */
async function timed(load: () => Promise<unknown>): Promise<{ wallMs: number; stallMs: number }> {
  let ticking = true;
  let last = performance.now();
  let stallMs = 0;
  const tick = (): void => {
    const now = performance.now();
    stallMs = Math.max(stallMs, now - last);
    last = now;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const t = performance.now();
  await load();
  const wallMs = performance.now() - t;
  ticking = false;
  stallMs = Math.max(stallMs, performance.now() - last);
  return { wallMs, stallMs };
}

export async function run(): Promise<BenchResult[]> {
  const n = tokenFileLimits.maxEntries;
  const lines = Array.from({ length: n }, (_, i) => `sha256:${i.toString(16).padStart(64, "0")} node node=n${String(i).padStart(127, "0")} name=k${String(i).padStart(63, "0")}`);
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-tokens-"));
  try {
    const path = join(dir, "tokens");
    await writeFile(path, `${lines.join("\n")}\n`);
    const steps: { wallMs: number; stallMs: number }[] = [];
    const whole: { wallMs: number; stallMs: number }[] = [];
    // One warm-up of each, then interleaved rounds.
    for (let round = 0; round < 6; round++) {
      const s = await timed(() => readTokenTable(path));
      // The baseline reads the same file the same way, then parses it in one go.
      const w = await timed(async () => TokenTable.parse(readFileSync(path, "utf8"), "f"));
      if (round > 0) {
        steps.push(s);
        whole.push(w);
      }
    }
    const mb = (Buffer.byteLength(lines.join("\n")) / 1e6).toFixed(1);
    return [
      { name: `tokens file of ${String(n)} node tokens (${mb} MB), read as the coordinator does: longest event-loop stall`, baseline: "the same parse in one go", ours: median(steps.map((r) => r.stallMs)), baselineValue: median(whole.map((r) => r.stallMs)), unit: "ms", higherIsBetter: false },
      { name: `the same: whole read and parse, wall time`, baseline: "the same parse in one go", ours: median(steps.map((r) => r.wallMs)), baselineValue: median(whole.map((r) => r.wallMs)), unit: "ms", higherIsBetter: false },
    ];
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
