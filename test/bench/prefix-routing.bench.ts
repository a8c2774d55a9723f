/**
 * Prefix-affinity routing against least-in-flight and round-robin, one run,
 * same backend-sim knobs for all: a `warden up` (own process) with three
 * models of 4 replicas each on its embedded agent — `px` (`routing: prefix`),
 * `lf` (least-in-flight, the default) and `rr` (round-robin, computed here:
 * the driver calls the replicas straight, in turn, skipping the
 * coordinator's hop — a small head start for the baseline). backend-sim
 * models a GPU with a prefix cache: 4 slots per replica, 10 ms per 64-character
 * prompt block not in its 512-block LRU (prompts and, after them, the answers
 * generated), then 16 tokens at 2 ms each (prefill dominates, as with long prompts). So
 * routing quality shows as latency and throughput.
 *
 * Workloads (closed loop: each client sends its next call when the last one ends):
 * (a) 64 multi-turn chats of 5 turns, each turn resending its history with
 *     the answers the model gave (chat messages, rendered by the backend;
 *     backend-sim caches an answer after its prompt, as engines keep the
 *     generated tokens), all 64 open at once; whichever of 12 clients is free
 *     takes the next conversation whose last turn was answered;
 * (b) 24 "apps" with a 3 000-character system prompt each, 384 calls of one
 *     of them plus a short user part, 12 clients (more system prompts than one
 *     replica's cache holds: routing decides whether each stays cached);
 * (c) 256 unrelated 1 000-character prompts, 12 clients.
 * Reported per workload: TTFT p50 and p99 (PredictStream, to the first
 * reply), completion tokens/s over the workload, and the busiest replica's
 * share of calls (from backend-sim's call log).
 *
 * Goal (c), prefix within 5 % of least-in-flight on unrelated prompts, is
 * smaller than what a shared machine moves between two runs one after the
 * other. So (c) is also run side by side: prefix and least-in-flight at
 * once, each with its own 12 clients and 4 replicas, over the same fresh
 * prompts, in 3 rounds — whatever the machine does falls on both; the rows
 * pool the rounds' TTFTs and take the median of the rounds' tokens/s.
 */
import { readFile } from "node:fs/promises";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, Backend, InferenceService, InstanceState } from "@warden/proto";
import { median, type BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";
import { conversationPool, multiTurnChats, randomPrompts, sharedSystemPrompts, type Workload, type WorkloadCall } from "./prefix-routing-workloads.js";

const replicas = 4;
/** Closed-loop clients: three quarters of the replicas' slots (4 × sim.parallel:4): below saturation, where TTFT is mostly prefill (at 16, queueing behind a busier replica offsets the multi-turn gain). */
const clients = 12;
const tokens = 16;
const policies = ["px", "lf", "rr"] as const;
type Policy = (typeof policies)[number];
const policyName: Record<Policy, string> = { px: "prefix", lf: "least-in-flight", rr: "round-robin" };

interface Outcome {
  readonly ttftMs: number[];
  readonly tokensPerS: number;
  /** Busiest replica's share of the workload's calls. */
  readonly busiestShare: number;
  /** Share of prompt blocks found cached. */
  readonly hit: number;
}

function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0;
}

const options = (c: WorkloadCall) => {
  const messages = c.turn?.() ?? c.messages;
  return messages === undefined ? { Prompt: c.prompt ?? "", Tokens: tokens } : { Messages: messages.map((m) => ({ role: m.role, content: m.content })), UseTokenizerTemplate: true, Tokens: tokens };
};
const decoder = new TextDecoder();

/** Runs `w` with `call` per request; TTFT per call, tokens/s over the whole run. */
async function drive(w: Workload, call: (c: WorkloadCall, client: number, i: number) => AsyncIterable<unknown>): Promise<{ ttftMs: number[]; tokensPerS: number }> {
  const ttftMs: number[] = [];
  let produced = 0;
  const start = performance.now();
  await Promise.all(
    w.map(async (calls, client) => {
      let i = 0;
      for (const c of calls) {
        const t0 = performance.now();
        let first = true;
        let answer = "";
        for await (const reply of call(c, client, i++)) {
          if (first) ttftMs.push(performance.now() - t0);
          first = false;
          produced++;
          const m = (reply as { message?: unknown }).message;
          if (c.answered !== undefined && m instanceof Uint8Array) answer += decoder.decode(m);
        }
        c.answered?.(answer);
      }
    }),
  );
  return { ttftMs, tokensPerS: produced / ((performance.now() - start) / 1000) };
}

/** Calls per backend-sim process (pid) in the call log after byte `from`. */
async function sharesSince(log: string, from: number): Promise<{ size: number; busiest: number; hit: number }> {
  const all = await readFile(log, "utf8").catch(() => "");
  const per = new Map<string, number>();
  let n = 0;
  let cached = 0;
  let blocks = 0;
  for (const m of all.slice(from).matchAll(/cached=(\d+)\/(\d+) pid=(\d+)$/gm)) {
    per.set(m[3] ?? "", (per.get(m[3] ?? "") ?? 0) + 1);
    cached += Number(m[1]);
    blocks += Number(m[2]);
    n++;
  }
  return { size: all.length, busiest: n === 0 ? 0 : Math.max(...per.values()) / n, hit: blocks === 0 ? 0 : cached / blocks };
}

/** Goal (c) side by side: prefix and least-in-flight at once over the same fresh unrelated prompts, 3 rounds (see the header). */
async function sideBySide(call: (p: "px" | "lf", c: WorkloadCall) => AsyncIterable<unknown>): Promise<BenchResult[]> {
  const ttft = { px: [] as number[], lf: [] as number[] };
  const rate = { px: [] as number[], lf: [] as number[] };
  for (let round = 0; round < 3; round++) {
    // Fresh prompts each round (a prompt seen before would be cached on some replica of both).
    const w = randomPrompts(256, 1_000, clients, 10 + round);
    const [px, lf] = await Promise.all([drive(w, (c) => call("px", c)), drive(w, (c) => call("lf", c))]);
    ttft.px.push(...px.ttftMs);
    ttft.lf.push(...lf.ttftMs);
    rate.px.push(px.tokensPerS);
    rate.lf.push(lf.tokensPerS);
  }
  const name = "(c) unrelated prompts, prefix and least-in-flight side by side at once, 3 rounds (goal: within 5 %)";
  process.stderr.write(`prefix-routing ${name}: prefix p50 ${percentile(ttft.px, 50).toFixed(1)} ms ${median(rate.px).toFixed(0)} tok/s | least-in-flight p50 ${percentile(ttft.lf, 50).toFixed(1)} ms ${median(rate.lf).toFixed(0)} tok/s\n`);
  return [
    { name: `${name}: TTFT p50`, baseline: policyName.lf, ours: percentile(ttft.px, 50), baselineValue: percentile(ttft.lf, 50), unit: "ms", higherIsBetter: false },
    { name: `${name}: TTFT p99`, baseline: policyName.lf, ours: percentile(ttft.px, 99), baselineValue: percentile(ttft.lf, 99), unit: "ms", higherIsBetter: false },
    { name: `${name}: tokens/s`, baseline: policyName.lf, ours: median(rate.px), baselineValue: median(rate.lf), unit: "tokens/s", higherIsBetter: true },
  ];
}

export async function run(): Promise<BenchResult[]> {
  const dir = mkdtempSync(join(tmpdir(), "warden-bench-prefix-"));
  const knobs = (p: Policy) => `["sim.parallel:4", "sim.token_delay_ms:2", "sim.prefill_block_ms:10", "sim.prefix_cache_blocks:512", "sim.prefix_block_chars:64", "sim.call_log:${join(dir, `${p}.log`)}"]`;
  const models = policies.map((p) => `{ id: ${p}, backend: backend-sim, replicas: { min: ${String(replicas)}, max: ${String(replicas)} }${p === "px" ? ", routing: prefix" : ""}, options: ${knobs(p)} }`);
  const coordinator = await startBenchCoordinator("prefix", 23000, undefined, { models, agent: `maxReplicasPerModel: ${String(replicas)}` });
  const direct: Client<typeof Backend>[] = [];
  try {
    const admin = createClient(AdminService, coordinator.address);
    const deadline = performance.now() + 300_000;
    let rrAddresses: string[] = [];
    for (;;) {
      const r = await admin.listModels({}).catch(() => undefined);
      const ready = (p: Policy) => (r?.instances ?? []).filter((i) => i.model === p && i.state === InstanceState.READY && !i.pendingEviction);
      if (policies.every((p) => ready(p).length === replicas)) {
        rrAddresses = ready("rr").map((i) => i.address);
        break;
      }
      if (performance.now() > deadline) throw new Error(`replicas not ready after 300 s: ${policies.map((p) => ready(p).length).join("/")}`);
      await new Promise((res) => setTimeout(res, 250));
    }
    admin.close();
    for (const a of rrAddresses) direct.push(createClient(Backend, a));
    const inference = createClient(InferenceService, coordinator.address);
    // Factories: a multi-turn workload records each run's answers in its calls.
    const workloads: [string, () => Workload][] = [
      ["(a) 64 multi-turn chats x 5 turns", () => conversationPool(multiTurnChats(64, 5, 1), clients)],
      ["(b) 24 shared 3 000-char system prompts, 384 calls", () => sharedSystemPrompts(24, 3_000, 384, clients, 2)],
      ["(c) 256 unrelated 1 000-char prompts", () => randomPrompts(256, 1_000, clients, 3)],
    ];
    // Warm-up: every replica serves a few calls (JIT, connections), with prompts no workload shares.
    for (const p of ["px", "lf"] as const) await drive(randomPrompts(16, 100, 8, 99), (c) => inference.predictStream({ model: p, options: options(c) }));
    await drive(randomPrompts(16, 100, 8, 98), (c, client) => (direct[client % direct.length] as Client<typeof Backend>).predictStream(options(c)));
    const offsets = new Map<Policy, number>(policies.map((p) => [p, 0]));
    const rows: BenchResult[] = [];
    for (const [k, [name, w]] of workloads.entries()) {
      const out = new Map<Policy, Outcome>();
      // Each workload starts with another policy: a burst of load from elsewhere on the machine does not always fall on the same one.
      for (const p of [...policies.slice(k % policies.length), ...policies.slice(0, k % policies.length)]) {
        offsets.set(p, (await sharesSince(join(dir, `${p}.log`), 0)).size);
        let turn = 0;
        const r =
          p === "rr"
            ? await drive(w(), (c) => (direct[turn++ % direct.length] as Client<typeof Backend>).predictStream(options(c)))
            : await drive(w(), (c) => inference.predictStream({ model: p, options: options(c) }));
        const shares = await sharesSince(join(dir, `${p}.log`), offsets.get(p) ?? 0);
        out.set(p, { ...r, busiestShare: shares.busiest, hit: shares.hit });
      }
      const px = out.get("px") as Outcome;
      for (const p of ["lf", "rr"] as const) {
        const b = out.get(p) as Outcome;
        rows.push(
          { name: `${name}: TTFT p50`, baseline: policyName[p], ours: percentile(px.ttftMs, 50), baselineValue: percentile(b.ttftMs, 50), unit: "ms", higherIsBetter: false },
          { name: `${name}: TTFT p99`, baseline: policyName[p], ours: percentile(px.ttftMs, 99), baselineValue: percentile(b.ttftMs, 99), unit: "ms", higherIsBetter: false },
          { name: `${name}: tokens/s`, baseline: policyName[p], ours: px.tokensPerS, baselineValue: b.tokensPerS, unit: "tokens/s", higherIsBetter: true },
          { name: `${name}: busiest replica's share of calls (mean 25 %; goal <= 37.5 %)`, baseline: policyName[p], ours: px.busiestShare * 100, baselineValue: b.busiestShare * 100, unit: "%", higherIsBetter: false },
        );
      }
      process.stderr.write(`prefix-routing ${name}: ${policies.map((p) => { const o = out.get(p) as Outcome; return `${policyName[p]} p50 ${percentile(o.ttftMs, 50).toFixed(1)} ms p99 ${percentile(o.ttftMs, 99).toFixed(1)} ms ${o.tokensPerS.toFixed(0)} tok/s busiest ${(o.busiestShare * 100).toFixed(1)} % cached ${(o.hit * 100).toFixed(0)} %`; }).join(" | ")}\n`);
    }
    rows.push(...(await sideBySide((p, c) => inference.predictStream({ model: p, options: options(c) }))));
    inference.close();
    return rows;
  } finally {
    for (const c of direct) c.close();
    await coordinator.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
