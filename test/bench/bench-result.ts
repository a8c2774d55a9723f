/** One benchmark line: our figure and the baseline's, measured in the same run. */
export interface BenchResult {
  name: string;
  /** What the baseline is (e.g. "plain grpc-js client"). */
  baseline: string;
  ours: number;
  baselineValue: number;
  /** Unit of both figures, e.g. "calls/s" or "ms". */
  unit: string;
  /** true for throughputs, false for latencies. */
  higherIsBetter: boolean;
}

/** How many times better ours is than the baseline (>1 is better, whatever the unit). */
export function advantage(r: BenchResult): number {
  return r.higherIsBetter ? r.ours / r.baselineValue : r.baselineValue / r.ours;
}

/** Median of a non-empty list. */
export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] ?? 0) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
}

/** Calls/s of `concurrency` callers each calling `call` back to back for `durationMs`. */
export async function throughput(durationMs: number, concurrency: number, call: () => Promise<unknown>): Promise<number> {
  const end = performance.now() + durationMs;
  let n = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await call();
        n++;
      }
    }),
  );
  return n / ((performance.now() - start) / 1000);
}

/** CPU of one call (user + system, this process), ms, for each of `calls` calls after `warmUps` uncounted ones; sorted ascending. Steadier than wall time on a shared machine. */
export async function cpuPerCall(calls: number, fn: () => unknown, warmUps = 0): Promise<number[]> {
  for (let i = 0; i < warmUps; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < calls; i++) {
    const start = process.cpuUsage();
    await fn();
    const d = process.cpuUsage(start);
    out.push((d.user + d.system) / 1_000);
  }
  return out.sort((a, b) => a - b);
}

/** The 99th percentile of ascending `sorted` (its largest value under 100 samples). */
export function p99Of(sorted: readonly number[]): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)] ?? 0;
}
