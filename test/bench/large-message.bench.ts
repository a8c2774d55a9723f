/**
 * A 15 MiB Predict (just under the 16 MiB message limit) through the
 * coordinator's data-plane listener (lean HTTP/2) against the same call
 * through its main port (grpc-js server), in the same run: median latency
 * over interleaved reps. The request is reassembled on the coordinator and
 * again on the backend, so a reassembly that is not linear in the message
 * size shows here first.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createClient } from "@warden/grpc";
import { InferenceService } from "@warden/proto";
import { median, type BenchResult } from "./bench-result.js";
import { freePort } from "../support/free-port.js";

const messageBytes = 15 * 1024 * 1024;
const reps = 9;

async function timed(call: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await call();
  return performance.now() - t;
}

export async function run(): Promise<BenchResult[]> {
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-large-"));
  const addr = `127.0.0.1:${String(await freePort())}`;
  const dataPlane = `127.0.0.1:${String(await freePort())}`;
  // Backend ports: WARDEN_TEST_PORT_BASE when set, so side-by-side checkouts keep apart.
  const portBase = Number(process.env.WARDEN_TEST_PORT_BASE ?? "23100");
  await writeFile(join(dir, "c.yaml"), `listen: ${addr}\ninferenceListen: ${dataPlane}\nstateDir: ${join(dir, "state")}\nagent: { ports: { min: ${String(portBase)}, max: ${String(portBase + 49)} }, nvidiaSmi: "" }\nmodels:\n  - { id: m, backend: backend-sim, options: ["sim.predict_tokens:1"] }\n`);
  const root = resolve(import.meta.dirname, "..", "..");
  const child = spawn(process.execPath, ["--import", "tsx", join(root, "services/cli/src/main.ts"), "up", "--config", join(dir, "c.yaml"), "--log-level", "warn"], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  for (let i = 0; i < 300 && !out.includes("Warden is running"); i++) await new Promise((r) => setTimeout(r, 100));
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
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGINT");
    await exited;
    await rm(dir, { recursive: true, force: true });
  }
}
