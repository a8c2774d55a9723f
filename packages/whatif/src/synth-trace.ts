import { invalidArgument, parseDurationMs, seededRng, type Rng } from "@warden/common";
import { traceHeader, type CallLine, type MemLine, type NodeLine, type TraceHeader } from "./trace-format.js";

/** One model's synthetic load: Poisson arrivals at `ratePerSec`, each call holding an instance about `meanDurationMs`. */
export interface SynthModel {
  readonly model: string;
  readonly ratePerSec: number;
  readonly meanDurationMs: number;
}

export interface SynthOptions {
  readonly models: readonly SynthModel[];
  readonly nodes: number;
  /** Memory per node (GPU or RAM), bytes. */
  readonly nodeBytes: number;
  readonly hours: number;
  readonly seed: number;
  /** Wall time of the first line. @default 1_750_000_000_000 */
  readonly startAtMs?: number;
}

/** Bounds (synth is driven from the command line). */
export const maxSynthModels = 64;
export const maxSynthNodes = 1024;
export const maxSynthHours = 24 * 7;
export const maxSynthRatePerSec = 100;
/** At most this many calls in one synthesised trace (a week at 16/s). */
export const maxSynthCalls = 10_000_000;

/**
 * Parses `--model m=rate/s[,duration]`, e.g. `chat=0.2/s,3s` (0.2 calls a
 * second, 3 s each) or `embed=5/s` (duration 500ms).
 */
export function parseSynthModel(spec: string): SynthModel {
  const m = /^([A-Za-z0-9._:/-]{1,128})=([0-9]*\.?[0-9]+)\/s(?:,(.+))?$/.exec(spec);
  if (m === null) throw invalidArgument("--model", `expected model=rate/s[,duration] (e.g. chat=0.2/s,3s), got ${JSON.stringify(spec)}`);
  const ratePerSec = Number(m[2]);
  if (!(ratePerSec > 0 && ratePerSec <= maxSynthRatePerSec)) throw invalidArgument("--model", `rate must be in (0, ${String(maxSynthRatePerSec)}]/s, got ${String(m[2])}`);
  const meanDurationMs = m[3] === undefined ? 500 : parseDurationMs(m[3], "--model duration", 3_600_000);
  return { model: m[1] ?? "", ratePerSec, meanDurationMs };
}

function exponential(r: Rng, mean: number): number {
  return -Math.log(1 - r.next()) * mean;
}

/** Checks the options against their bounds; throws naming the flag. */
export function checkSynthOptions(o: SynthOptions): void {
  if (o.models.length === 0 || o.models.length > maxSynthModels) throw invalidArgument("--model", `give 1 to ${String(maxSynthModels)} models`);
  if (!Number.isInteger(o.nodes) || o.nodes < 1 || o.nodes > maxSynthNodes) throw invalidArgument("--nodes", `must be an integer in [1, ${String(maxSynthNodes)}]`);
  if (!(o.nodeBytes > 0)) throw invalidArgument("--gib", "must be > 0");
  if (!(o.hours > 0 && o.hours <= maxSynthHours)) throw invalidArgument("--hours", `must be in (0, ${String(maxSynthHours)}]`);
  const calls = o.models.reduce((s, m) => s + m.ratePerSec, 0) * o.hours * 3600;
  if (calls > maxSynthCalls) throw invalidArgument("--model", `about ${String(Math.round(calls))} calls: at most ${String(maxSynthCalls)} in one trace (lower the rates or --hours)`);
}

/**
 * A trace for a cluster that does not exist yet: nodes named node-1..N that
 * join at the start with `nodeBytes` each, then every model's calls merged in
 * time order. Seeded: the same options give the same lines. Durations are
 * exponential around the mean, at least 1 ms.
 */
export function* synthTrace(o: SynthOptions): Generator<TraceHeader | CallLine | NodeLine | MemLine> {
  checkSynthOptions(o);
  const t0 = o.startAtMs ?? 1_750_000_000_000;
  yield traceHeader("synth", t0);
  for (let i = 1; i <= o.nodes; i++) {
    const node = `node-${String(i)}`;
    yield { t: "node", at: t0, node, ev: "joined" };
    yield { t: "mem", at: t0, node, totalBytes: o.nodeBytes, usedBytes: 0 };
  }
  const endMs = t0 + o.hours * 3_600_000;
  // One stream per model (so adding a model does not shift the others' calls).
  const streams = o.models.map((m, i) => ({ m, r: seededRng((o.seed * 7919 + i * 104_729 + 1) >>> 0), next: 0 }));
  for (const s of streams) s.next = t0 + exponential(s.r, 1000 / s.m.ratePerSec);
  for (;;) {
    // Few models: a linear pick of the earliest is cheaper than a heap.
    let first: (typeof streams)[number] | undefined;
    for (const s of streams) if (first === undefined || s.next < first.next) first = s;
    if (first === undefined || first.next >= endMs) return;
    const at = Math.round(first.next);
    yield { t: "call", at, m: first.m.model, waitMs: 0, durMs: Math.max(1, Math.round(exponential(first.r, first.m.meanDurationMs))), ok: true };
    first.next += exponential(first.r, 1000 / first.m.ratePerSec);
  }
}
