import { Worker } from "node:worker_threads";
import type { Violation } from "../check/checker.js";
import type { SimOptions, SimProfile } from "./sim-options.js";

export interface CampaignResult {
  readonly seeds: number;
  readonly simulatedMs: number;
  readonly wallMs: number;
  readonly steps: number;
  readonly coverage: Map<string, number>;
  readonly failures: { readonly seed: number; readonly violations: readonly Violation[] }[];
}

interface WorkerMessage {
  readonly seed: number;
  readonly violations: readonly Violation[];
  readonly simulatedMs: number;
  readonly steps: number;
  readonly coverage: Record<string, number>;
}

/** What a campaign has found so far (progress reports: a long campaign stopped early still says what it covered). */
export interface CampaignProgress {
  readonly done: number;
  readonly simulatedMs: number;
  readonly wallMs: number;
  readonly failures: readonly { readonly seed: number; readonly violations: readonly Violation[] }[];
}

/** Runs seeds [first, first + count) split across `workers` worker threads (the runner's only host concurrency). */
export async function runCampaign(first: number, count: number, workers = 2, onProgress?: (p: CampaignProgress) => void, profile: SimProfile = "short", overrides?: Partial<SimOptions>): Promise<CampaignResult> {
  const t0 = performance.now();
  const coverage = new Map<string, number>();
  const failures: { seed: number; violations: readonly Violation[] }[] = [];
  let simulatedMs = 0;
  let steps = 0;
  let done = 0;
  const shares: number[][] = Array.from({ length: workers }, () => []);
  for (let i = 0; i < count; i++) shares[i % workers]?.push(first + i);
  await Promise.all(
    shares.map(
      (seeds) =>
        new Promise<void>((resolve, reject) => {
          // Worker threads do not inherit the parent's --import hooks on Node 20: register tsx first.
          const entry = new URL("./campaign-worker.ts", import.meta.url).href;
          const w = new Worker(`import("tsx/esm/api").then((m) => { m.register(); return import(${JSON.stringify(entry)}); });`, { eval: true, workerData: { seeds, profile, overrides } });
          w.on("message", (m: WorkerMessage) => {
            simulatedMs += m.simulatedMs;
            steps += m.steps;
            for (const [k, v] of Object.entries(m.coverage)) coverage.set(k, (coverage.get(k) ?? 0) + v);
            if (m.violations.length > 0) failures.push({ seed: m.seed, violations: m.violations });
            onProgress?.({ done: ++done, simulatedMs, wallMs: performance.now() - t0, failures });
          });
          w.on("error", reject);
          w.on("exit", () => { resolve(); });
        }),
    ),
  );
  failures.sort((a, b) => a.seed - b.seed);
  return { seeds: count, simulatedMs, wallMs: performance.now() - t0, steps, coverage, failures };
}
