/**
 * Replicas, each against a baseline in the same run:
 *
 * 1. Throughput: Predict calls/s through the coordinator's data-plane
 *    listener, 64 concurrent callers, for models with 1, 2 and 4 replicas
 *    (min = max) on one embedded agent (`maxReplicasPerModel: 4`, spread any:
 *    one coordinator process, fewer processes = less CPU noise). backend-sim
 *    is the bottleneck, as a GPU would be: one prediction at a time
 *    (`sim.parallel:1`) at 5 tokens × 10 ms (`sim.token_delay_ms`), so one
 *    replica serves ~20 calls/s and the coordinator's CPU stays far from its
 *    limit. Every replica is ready before measuring; the three models are
 *    measured in interleaved rounds, medians reported.
 * 2. Routing cost, in-process: `Loader.acquire` + complete (what the
 *    coordinator calls per inference call) and the pure choice inside it
 *    (`pickReplica`, the head of the routing order) with 100 ready replicas
 *    of one model against one; and, for reference, the full scan
 *    (`chooseReplica`) that was the per-call choice before the order was kept.
 */
import { createClient } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";
import { median, throughput, type BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";
import { acquireCostNs, chooseCostNs, loaderWithReplicas } from "./replica-routing-cost.js";

const counts = [1, 2, 4] as const;
const simOptions = '["sim.parallel:1", "sim.token_delay_ms:10", "sim.predict_tokens:5"]';
const rounds = 5;
const roundMs = 3_000;
const callers = 64;

async function throughputResults(): Promise<BenchResult[]> {
  const models = counts.map((n) => `{ id: r${String(n)}, backend: backend-sim, replicas: { min: ${String(n)}, max: ${String(n)} }, spread: any, options: ${simOptions} }`);
  const coordinator = await startBenchCoordinator("replicas", 22500, undefined, { models, agent: "maxReplicasPerModel: 4" });
  try {
    const admin = createClient(AdminService, coordinator.address);
    const deadline = performance.now() + 180_000;
    for (;;) {
      const r = await admin.listModels({}).catch(() => undefined);
      const ready = counts.map((n) => r?.replicas.find((m) => m.model === `r${String(n)}`)?.ready ?? 0);
      if (ready.every((k, i) => k === counts[i])) break;
      if (performance.now() > deadline) throw new Error(`replicas not ready after 180 s: ${ready.join("/")} of ${counts.join("/")}`);
      await new Promise((res) => setTimeout(res, 250));
    }
    admin.close();
    const inference = createClient(InferenceService, coordinator.dataPlane);
    const call = (model: string) => (): Promise<unknown> => inference.predict({ model, options: { Prompt: "hi" } });
    for (const n of counts) await throughput(500, callers, call(`r${String(n)}`));
    const by = new Map<number, number[]>(counts.map((n) => [n, []]));
    for (let i = 0; i < rounds; i++) for (const n of counts) by.get(n)?.push(await throughput(roundMs, callers, call(`r${String(n)}`)));
    inference.close();
    const one = median(by.get(1) ?? []);
    const spread = (n: number) => (by.get(n) ?? []).map((v) => v.toFixed(0)).join("/");
    process.stderr.write(`replicas: rounds calls/s 1=${spread(1)} 2=${spread(2)} 4=${spread(4)}\n`);
    return [2, 4].map((n) => ({
      name: `Predict, ${String(callers)} concurrent callers, ${String(n)} replicas vs 1 (backend-sim 1 slot, 50 ms per call; goal >= ${n === 2 ? "1.8" : "3.4"}x)`,
      baseline: "1 replica, same run",
      ours: median(by.get(n) ?? []),
      baselineValue: one,
      unit: "calls/s",
      higherIsBetter: true,
    }));
  } finally {
    await coordinator.close();
  }
}

async function routingResults(): Promise<BenchResult[]> {
  const one = loaderWithReplicas(1);
  const many = loaderWithReplicas(100);
  const iterations = 20_000;
  // Warm-up (JIT) on both sides, then interleaved rounds.
  await acquireCostNs(one, iterations, 0);
  await acquireCostNs(many, iterations, 50);
  for (const how of ["pick", "scan"] as const) {
    chooseCostNs(one, iterations, how);
    chooseCostNs(many, iterations, how);
  }
  const acq = { one: [] as number[], many: [] as number[] };
  const pure = { one: [] as number[], many: [] as number[] };
  const scan = { one: [] as number[], many: [] as number[] };
  for (let i = 0; i < 7; i++) {
    acq.one.push(await acquireCostNs(one, iterations, 0));
    acq.many.push(await acquireCostNs(many, iterations, 50));
    pure.one.push(chooseCostNs(one, iterations, "pick"));
    pure.many.push(chooseCostNs(many, iterations, "pick"));
    scan.one.push(chooseCostNs(one, iterations, "scan"));
    scan.many.push(chooseCostNs(many, iterations, "scan"));
  }
  return [
    { name: "routing per call (Loader.acquire + complete), 100 ready replicas, 50 calls in flight (goal <= 2x)", baseline: "1 ready instance", ours: median(acq.many) / 1000, baselineValue: median(acq.one) / 1000, unit: "µs", higherIsBetter: false },
    { name: "pure routing choice (pickReplica: head of the routing order), 100 ready replicas (goal <= 2x)", baseline: "1 ready instance", ours: median(pure.many) / 1000, baselineValue: median(pure.one) / 1000, unit: "µs", higherIsBetter: false },
    { name: "reference, no goal: full scan (chooseReplica, the per-call choice before the routing order), 100 ready replicas", baseline: "1 ready instance", ours: median(scan.many) / 1000, baselineValue: median(scan.one) / 1000, unit: "µs", higherIsBetter: false },
  ];
}

export async function run(): Promise<BenchResult[]> {
  // In-process part first: the coordinator and its seven backends are not running yet.
  const routing = await routingResults();
  return [...(await throughputResults()), ...routing];
}
