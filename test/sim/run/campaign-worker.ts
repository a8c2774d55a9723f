import { parentPort, workerData } from "node:worker_threads";
import { runSeed } from "./run-seed.js";
import type { SimOptions, SimProfile } from "./sim-options.js";

/** One campaign worker: runs its share of seeds and posts each result (without trace). */
const { seeds, profile, overrides } = workerData as { seeds: number[]; profile: SimProfile; overrides?: Partial<SimOptions> };
for (const seed of seeds) {
  const r = await runSeed(seed, { profile, ...(overrides === undefined ? {} : { overrides }) });
  parentPort?.postMessage({ seed, violations: r.violations, simulatedMs: r.simulatedMs, steps: r.steps, coverage: r.coverage });
}
