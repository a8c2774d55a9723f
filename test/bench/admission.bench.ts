/**
 * Fair sharing under a flood: tenant A sends calls at 4× a model's capacity
 * while tenant B calls at 20 % of it, through a real coordinator process to
 * a backend-sim with 16 slots (llama.cpp-style: the rest wait in its own
 * FIFO). Same run, same knobs, two models: `fair` has an `admission:` gate
 * (16 in flight, the rest waiting by token, round robin; a token past its
 * share refused with RESOURCE_EXHAUSTED), `open` has none (everything goes
 * to the backend and waits in its FIFO). B alone on `fair` is the baseline.
 * Open loop (calls sent on a schedule, whatever the answers): a flood does
 * not slow down because the server is slow. Twice: every call 500 ms, then
 * calls of 250–750 ms (a fixed spread, mean 500) — equal calls started
 * together end together, so slots free in bursts and a waiting call waits
 * for the next burst; calls of different lengths free slots spread out.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, WardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";
import { mintToken, tokenLine } from "@warden/coordinator";
import type { BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";

/** Mean length of a call; each call's is its Tokens × tokenMs. */
const serviceMs = 500;
const tokenMs = 10;
const slots = 16;
/** Calls/s one replica completes: 16 slots × 2 a second. */
const capacityPerS = (slots * 1000) / serviceMs;
const windowMs = Number(process.env.WARDEN_BENCH_ADMISSION_MS ?? "20000");

interface Outcome {
  readonly latencies: number[];
  ok: number;
  refused: number;
  /** Deadline passed or any other failure. */
  failed: number;
}

function p99(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] ?? Number.NaN;
}

/** Sends calls at `ratePerS` for `durationMs` (open loop) and waits for the last answer. */
async function openLoop(ratePerS: number, durationMs: number, call: () => Promise<unknown>): Promise<Outcome> {
  const out: Outcome = { latencies: [], ok: 0, refused: 0, failed: 0 };
  const pending: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; ; i++) {
    const due = start + (i * 1000) / ratePerS;
    if (due - start >= durationMs) break;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const t0 = performance.now();
    pending.push(
      call().then(
        () => {
          out.ok++;
          out.latencies.push(performance.now() - t0);
        },
        (err: unknown) => {
          const e = WardenError.from(err);
          if (e.code === Code.ResourceExhausted) out.refused++;
          else {
            out.failed++;
            if (out.failed <= 2) process.stderr.write(`admission bench: a call failed: ${e.message}\n`);
          }
        },
      ),
    );
  }
  await Promise.all(pending);
  return out;
}

export async function run(): Promise<BenchResult[]> {
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-admission-"));
  const a = mintToken();
  const b = mintToken();
  const admin = mintToken();
  await writeFile(join(dir, "tokens"), [tokenLine(a, "inference", { name: "tenant-a" }), tokenLine(b, "inference", { name: "tenant-b" }), tokenLine(admin, "admin", { name: "bench" })].join("\n") + "\n", { mode: 0o600 });
  // A call's length is its Tokens × 10 ms: 50 tokens is the 500 ms mean.
  const knobs = `options: ["sim.parallel:${String(slots)}", "sim.token_delay_ms:${String(tokenMs)}", "sim.predict_tokens:${String(serviceMs / tokenMs)}"], replicas: { targetInFlight: ${String(slots)} }`;
  const coordinator = await startBenchCoordinator("admission", 24000, undefined, {
    top: `auth: { tokensFile: ${join(dir, "tokens")} }`,
    models: [
      `{ id: fair, backend: backend-sim, ${knobs}, admission: { maxInFlightPerReplica: ${String(slots)}, maxQueued: 512, maxQueuedPerPrincipal: ${String(slots)} } }`,
      `{ id: open, backend: backend-sim, ${knobs} }`,
    ],
  });
  const clients: Client<typeof InferenceService>[] = [];
  const inference = (token: string): Client<typeof InferenceService> => {
    const c = createClient(InferenceService, coordinator.dataPlane, { headers: { authorization: `Bearer ${token}` } });
    clients.push(c);
    return c;
  };
  try {
    const adminClient = createClient(AdminService, coordinator.address, { headers: { authorization: `Bearer ${admin}` } });
    await adminClient.loadModel({ model: "fair" }, { timeoutMs: 60_000 });
    await adminClient.loadModel({ model: "open" }, { timeoutMs: 60_000 });
    adminClient.close();
    const ca = inference(a);
    const cb = inference(b);
    // equal: every call 500 ms. varied: 250–750 ms (25–75 tokens in a fixed spread, mean 500), as
    // completions of different lengths are; the same sequence for every phase.
    const tokensOf = (variant: "equal" | "varied", i: number): number => (variant === "equal" ? serviceMs / tokenMs : 25 + ((i * 37) % 51));
    const call = (c: Client<typeof InferenceService>, model: string, variant: "equal" | "varied") => {
      let i = 0;
      return (): Promise<unknown> => c.predict({ model, options: { Prompt: "x", Tokens: tokensOf(variant, i++) } }, { timeoutMs: 10_000 });
    };
    // Warm both paths.
    await openLoop(20, 1000, call(cb, "fair", "equal"));
    await openLoop(20, 1000, call(cb, "open", "equal"));

    const bRate = capacityPerS * 0.2;
    const aRate = capacityPerS * 4;
    const rows: BenchResult[] = [];
    for (const variant of ["equal", "varied"] as const) {
      const lengths = variant === "equal" ? "every call 500 ms" : "calls of 250–750 ms, mean 500";
      const alone = await openLoop(bRate, windowMs, call(cb, "fair", variant));
      const [floodFair, bFair] = await Promise.all([openLoop(aRate, windowMs, call(ca, "fair", variant)), openLoop(bRate, windowMs, call(cb, "fair", variant))]);
      // Let the open model's backend FIFO drain before its round.
      await new Promise((r) => setTimeout(r, 3000));
      const [floodOpen, bOpen] = await Promise.all([openLoop(aRate, windowMs, call(ca, "open", variant)), openLoop(bRate, windowMs, call(cb, "open", variant))]);
      await new Promise((r) => setTimeout(r, 3000));
      const say = (o: Outcome): string => `${String(o.ok)} ok, ${String(o.refused)} refused (429), ${String(o.failed)} failed or timed out`;
      const detail = `${lengths}; A at ${String(aRate)}/s (4× capacity ${String(capacityPerS)}/s), B at ${String(bRate)}/s, ${String(windowMs / 1000)} s; fair: A ${say(floodFair)}, B ${say(bFair)}; open: A ${say(floodOpen)}, B ${say(bOpen)}`;
      process.stderr.write(`admission bench: ${detail}; B p99 alone ${p99(alone.latencies).toFixed(0)} ms, fair ${p99(bFair.latencies).toFixed(0)} ms, open ${p99(bOpen.latencies).toFixed(0)} ms\n`);
      rows.push(
        {
          name: `admission: tenant B's p99 while tenant A floods a gated model (${detail})`,
          baseline: "B's p99 alone on the same model",
          ours: p99(bFair.latencies),
          baselineValue: p99(alone.latencies),
          unit: "ms",
          higherIsBetter: false,
        },
        {
          name: `admission: tenant B's p99 under the same flood, gated model vs a model without admission (backend FIFO only; ${lengths})`,
          baseline: `no gate (B: ${say(bOpen)})`,
          ours: p99(bFair.latencies),
          baselineValue: bOpen.latencies.length === 0 ? Number.POSITIVE_INFINITY : p99(bOpen.latencies),
          unit: "ms",
          higherIsBetter: false,
        },
      );
    }
    return rows;
  } finally {
    for (const c of clients) c.close();
    await coordinator.close();
    await rm(dir, { recursive: true, force: true });
  }
}
