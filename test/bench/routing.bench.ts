/**
 * Predict through the coordinator (load-on-demand lookup, watchdog tracking,
 * ModelIdentity routing) against Predict straight to the same backend-sim
 * process, in the same run: 64 concurrent callers (calls/s) and 1 caller
 * (median latency; the difference is what the coordinator adds). Through both
 * of the coordinator's listeners: the data-plane one (`inferenceListen`, lean
 * HTTP/2) and the main port (grpc-js, all services). Next to them, in the
 * same rounds: Embedding through the data plane's backend.Backend (the
 * generic pass-through router, model in the `warden-model` metadata) against
 * Embedding straight to the backend. And the cost of prefix-affinity
 * routing on the data plane: Predict with a 1 000-character prompt to a
 * `routing: prefix` model (its prompt read from the request bytes, hashed,
 * looked up and recorded per call) against the same to a least-in-flight
 * model, one replica each, in the same rounds.
 */
import { Metadata } from "@grpc/grpc-js";
import { createClient } from "@warden/grpc";
import { AdminService, Backend, InferenceService } from "@warden/proto";
import { median, throughput, type BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";

async function latencies(count: number, call: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const t = performance.now();
    await call();
    out.push(performance.now() - t);
  }
  return out;
}

export async function run(): Promise<BenchResult[]> {
  // The coordinator runs as its own process (as in production), so the
  // callers in this process do the same work on both sides.
  const coordinator = await startBenchCoordinator("routing", 23000, undefined, {
    models: ['{ id: m, backend: backend-sim, options: ["sim.predict_tokens:1"] }', '{ id: mp, backend: backend-sim, routing: prefix, options: ["sim.predict_tokens:1"] }'],
  });
  const addr = coordinator.address;
  const dataPlane = coordinator.dataPlane;
  try {
    // Both coordinator ports: the data-plane listener (lean HTTP/2, InferenceService only)
    // and the main port (grpc-js, every service).
    const inference = createClient(InferenceService, dataPlane);
    const inferenceMain = createClient(InferenceService, addr);
    await inference.predict({ model: "m", options: { Prompt: "warm" } });
    const admin = createClient(AdminService, addr);
    const address = (await admin.listModels({})).instances[0]?.address ?? "";
    admin.close();
    const direct = createClient(Backend, address);
    const viaWarden = (): Promise<unknown> => inference.predict({ model: "m", options: { Prompt: "hi" } });
    const viaMain = (): Promise<unknown> => inferenceMain.predict({ model: "m", options: { Prompt: "hi" } });
    const straight = (): Promise<unknown> => direct.predict({ Prompt: "hi", ModelIdentity: "m" });
    const backendViaWarden = createClient(Backend, dataPlane);
    const md = new Metadata();
    md.set("warden-model", "m");
    const embedVia = (): Promise<unknown> => backendViaWarden.embedding({ Prompt: "hi" }, { metadata: md });
    const embedStraight = (): Promise<unknown> => direct.embedding({ Prompt: "hi", ModelIdentity: "m" });
    // A prompt of 15 whole 64-character blocks, different per call after its first 640 characters (a shared system prompt, varying user parts).
    const longPrompt = (i: number): string => `${"You are the support assistant of a bicycle shop. Answer briefly. ".repeat(10).slice(0, 640)}${String(i).padStart(360, "q")}`;
    let n = 0;
    const longLeast = (): Promise<unknown> => inference.predict({ model: "m", options: { Prompt: longPrompt(n++) } });
    const longPrefix = (): Promise<unknown> => inference.predict({ model: "mp", options: { Prompt: longPrompt(n++) } });
    await throughput(500, 16, longPrefix);
    await throughput(500, 16, longLeast);
    await throughput(500, 16, embedVia);
    await throughput(500, 16, embedStraight);
    await throughput(500, 16, viaWarden);
    await throughput(500, 16, viaMain);
    await throughput(500, 16, straight);
    // Interleaved rounds, medians: the three processes share two cores, so single runs are noisy.
    const rounds = 5;
    const ours: number[] = [];
    const main: number[] = [];
    const base: number[] = [];
    const embedOurs: number[] = [];
    const embedBase: number[] = [];
    const prefixOurs: number[] = [];
    const prefixBase: number[] = [];
    for (let i = 0; i < rounds; i++) {
      prefixBase.push(await throughput(1500, 64, longLeast));
      prefixOurs.push(await throughput(1500, 64, longPrefix));
      base.push(await throughput(1500, 64, straight));
      ours.push(await throughput(1500, 64, viaWarden));
      main.push(await throughput(1500, 64, viaMain));
      embedBase.push(await throughput(1500, 64, embedStraight));
      embedOurs.push(await throughput(1500, 64, embedVia));
    }
    const lb = median(await latencies(600, straight));
    const lo = median(await latencies(600, viaWarden));
    const lm = median(await latencies(600, viaMain));
    direct.close();
    backendViaWarden.close();
    inference.close();
    inferenceMain.close();
    return [
      { name: "Predict, 64 concurrent callers, data-plane listener", baseline: "straight to backend-sim", ours: median(ours), baselineValue: median(base), unit: "calls/s", higherIsBetter: true },
      { name: "Predict, 64 concurrent callers, main port (grpc-js server)", baseline: "straight to backend-sim", ours: median(main), baselineValue: median(base), unit: "calls/s", higherIsBetter: true },
      { name: "Embedding (backend.Backend, warden-model metadata), 64 concurrent callers, data-plane listener", baseline: "straight to backend-sim", ours: median(embedOurs), baselineValue: median(embedBase), unit: "calls/s", higherIsBetter: true },
      { name: "Predict, 1 000-character prompt, 64 concurrent callers, data-plane listener, routing: prefix", baseline: "the same to a least-in-flight model", ours: median(prefixOurs), baselineValue: median(prefixBase), unit: "calls/s", higherIsBetter: true },
      { name: `Predict, 1 caller, median latency, data-plane listener (coordinator adds ${(lo - lb).toFixed(3)} ms)`, baseline: "straight to backend-sim", ours: lo, baselineValue: lb, unit: "ms", higherIsBetter: false },
      { name: `Predict, 1 caller, median latency, main port (coordinator adds ${(lm - lb).toFixed(3)} ms)`, baseline: "straight to backend-sim", ours: lm, baselineValue: lb, unit: "ms", higherIsBetter: false },
    ];
  } finally {
    await coordinator.close();
  }
}
