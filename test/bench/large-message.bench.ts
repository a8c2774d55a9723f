/**
 * A 15 MiB Predict (the message limit is 50 MiB) through the
 * coordinator's data-plane listener (lean HTTP/2) against the same call
 * through its main port (grpc-js server), in the same run: median latency
 * over interleaved reps. The request is reassembled on the coordinator and
 * again on the backend, so a reassembly that is not linear in the message
 * size shows here first.
 */
import { createClient } from "@warden/grpc";
import { InferenceService } from "@warden/proto";
import { median, type BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";

const messageBytes = 15 * 1024 * 1024;
const reps = 9;

async function timed(call: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await call();
  return performance.now() - t;
}

export async function run(): Promise<BenchResult[]> {
  const coordinator = await startBenchCoordinator("large", 23100);
  const addr = coordinator.address;
  const dataPlane = coordinator.dataPlane;
  try {
    const viaDataPlane = createClient(InferenceService, dataPlane);
    const viaMain = createClient(InferenceService, addr);
    const prompt = "p".repeat(messageBytes);
    const call = (c: typeof viaMain) => async (): Promise<void> => {
      const r = await c.predict({ model: "m", options: { Prompt: prompt } }, { timeoutMs: 120_000 });
      if (r.reply?.promptTokens !== messageBytes) throw new Error(`backend saw ${String(r.reply?.promptTokens)} prompt bytes, not ${String(messageBytes)}`);
    };
    // Load the model and warm both paths.
    await call(viaDataPlane)();
    await call(viaMain)();
    const dp: number[] = [];
    const main: number[] = [];
    for (let i = 0; i < reps; i++) {
      dp.push(await timed(call(viaDataPlane)));
      main.push(await timed(call(viaMain)));
    }
    viaDataPlane.close();
    viaMain.close();
    const spread = (xs: number[]): string => `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)} ms`;
    return [
      {
        name: `Predict of 15 MiB, 1 caller, median of ${String(reps)}, data-plane listener (range ${spread(dp)}; main port ${spread(main)})`,
        baseline: "main port (grpc-js server)",
        ours: median(dp),
        baselineValue: median(main),
        unit: "ms",
        higherIsBetter: false,
      },
    ];
  } finally {
    await coordinator.close();
  }
}
