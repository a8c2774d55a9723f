import { parentPort, workerData } from "node:worker_threads";
import { runSeed } from "./run-seed.js";

/** One campaign worker: runs its share of seeds and posts each result (without trace). */
const { seeds } = workerData as { seeds: number[] };
for (const seed of seeds) {
  const r = await runSeed(seed);
  parentPort?.postMessage({ seed, violations: r.violations, simulatedMs: r.simulatedMs, steps: r.steps, coverage: r.coverage });
}
