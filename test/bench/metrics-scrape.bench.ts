/**
 * The instance walk of one `/metrics` scrape at 10 000 ready instances on
 * 1 000 nodes (the swarm's 1 000-node shape): counts per node from the
 * per-node index, no view made (`core.forEachNodeCount`, shared by the
 * scrape's two per-node gauges), against what the gauges did each on their
 * own before — two whole snapshots (with every node's occupancy and memory
 * views and every address's request view) and a copy of each instance view —
 * and against one view of every instance (`core.instances()`, what the
 * shared walk made before the per-node counts), printed. Same watchdog core,
 * same run; CPU per scrape, median of 3 rounds of 20.
 * `npm run bench -- metrics-scrape`.
 */
import { createWatchdogCore } from "@warden/watchdog";
import type { BenchResult } from "./bench-result.js";

function cpuMsPer(f: () => void, n: number): number {
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) f();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000 / n;
}

const median = (v: readonly number[]): number => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] ?? Number.NaN;

export async function run(): Promise<BenchResult[]> {
  const clock = { now: () => 0, wallNow: () => 0, setTimer: () => () => {} };
  const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true }, policy: { idleCheck: true, busyCheck: true } });
  for (let i = 0; i < 10_000; i++) core.registerReady({ nodeId: `node-${String(i % 1000)}`, model: `m${String(i % 10)}`, incarnation: `inc-${String(i)}`, address: `10.0.${String(i >> 8)}.${String(i & 255)}:50051`, sizeBytes: 1 << 30 });
  const separate = (): void => {
    const a = core.snapshot();
    core.snapshot();
    a.instances.map((v) => ({ ...v, placement: "remote-only", backend: "backend-sim" }));
  };
  const views = (): void => {
    core.instances();
  };
  const counts = (): void => {
    core.forEachNodeCount(() => {});
  };
  const before: number[] = [];
  const viewed: number[] = [];
  const after: number[] = [];
  for (let r = 0; r < 3; r++) {
    before.push(cpuMsPer(separate, 20));
    viewed.push(cpuMsPer(views, 20));
    after.push(cpuMsPer(counts, 20));
  }
  process.stderr.write(`metrics-scrape: per-node counts ${median(after).toFixed(2)} ms, one view of every instance ${median(viewed).toFixed(2)} ms, separate snapshots ${median(before).toFixed(2)} ms\n`);
  return [{ name: "one /metrics scrape's instance walk, 10 000 ready instances on 1 000 nodes: counts per node, no view", baseline: "each gauge on its own: two whole snapshots and a copy of each view", ours: median(after), baselineValue: median(before), unit: "ms CPU", higherIsBetter: false }];
}
