/**
 * Eviction latency with HA against the single-machine journal, same run
 *: the same workload on two coordinators, each with its own agent
 * process and real backend-sim backends —
 *   (a) the file journal (the single-machine default, fdatasync per batch);
 *   (b) the JetStream journal, replicas 3, on a local 3-server nats-server
 *       cluster (a stop intent is acked once 2 of 3 servers hold it).
 *
 * One eviction = UnloadModel round trip: the lifecycle lock, the busy check,
 * Free, the stop intent (durable before StopBackend: the step HA changes),
 * StopBackend until the agent saw the process exit, and the intent's clear.
 * Evictions run one at a time; the models are loaded (concurrently) between
 * batches, off the clock.
 *
 * Three runs, the sides interleaved batch by batch; each run has
 * `batchesPerRun` × `modelCount` evictions per side. The lines report the
 * median run (by that run's own statistic) and every run's figure in the name
 * (the machine is shared, so the spread matters), plus one line over all
 * evictions pooled. On the HA side, the stop-intent append inside the
 * eviction is timed too (the part a replicated ack adds).
 */
import { connectAudit } from "@warden/audit";
import { uniqueTag } from "../support/agent-harness.js";
import { startNatsCluster } from "../support/nats-cluster.js";
import { median, type BenchResult } from "./bench-result.js";
import { startEvictionSide, type EvictionSide } from "./ha-eviction-side.js";

const runs = 3;
const modelCount = 10;
const batchesPerRun = 3; // 30 evictions per side per run

function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((s.length * p) / 100) - 1)] ?? 0;
}

interface Stats {
  p50: number;
  p90: number;
  max: number;
}

const statsOf = (ms: readonly number[]): Stats => ({ p50: median(ms), p90: percentile(ms, 90), max: Math.max(...ms) });

async function batch(side: EvictionSide, sink: number[]): Promise<void> {
  await side.loadAll();
  for (const m of side.models) sink.push(await side.evict(m));
}

const fmt = (v: number): string => v.toPrecision(3);

export async function run(): Promise<BenchResult[]> {
  const cluster = await startNatsCluster();
  const nc = await connectAudit({ servers: [...cluster.urls], reconnectTimeWaitMs: 100 });
  const tag = uniqueTag("bench-ha-eviction");
  const sides: EvictionSide[] = [];
  try {
    const file = await startEvictionSide({ label: "file", tag, modelCount });
    sides.push(file);
    const ha = await startEvictionSide({ label: "ha", tag, modelCount, nc });
    sides.push(ha);
    // Warm-up (JIT, backend-sim start-up, stream files, raft): one batch each, not counted.
    await batch(file, []);
    await batch(ha, []);
    const warmIntents = ha.intentAckMs.length;
    const fileRuns: number[][] = [];
    const haRuns: number[][] = [];
    for (let r = 0; r < runs; r++) {
      const f: number[] = [];
      const h: number[] = [];
      for (let b = 0; b < batchesPerRun; b++) {
        await batch(file, f);
        await batch(ha, h);
      }
      fileRuns.push(f);
      haRuns.push(h);
      process.stderr.write(`ha-eviction run ${String(r + 1)}: file p50 ${fmt(median(f))} ms, HA p50 ${fmt(median(h))} ms (${String(f.length)} evictions each)\n`);
    }
    const fileStats = fileRuns.map(statsOf);
    const haStats = haRuns.map(statsOf);
    const perEviction = modelCount * batchesPerRun;
    const line = (what: keyof Stats, label: string): BenchResult => ({
      name: `eviction (UnloadModel → stopped), ${label} of ${String(perEviction)} per run (HA R3 runs ${haStats.map((s) => fmt(s[what])).join("/")}; file ${fileStats.map((s) => fmt(s[what])).join("/")})`,
      baseline: "file journal, same run",
      ours: median(haStats.map((s) => s[what])),
      baselineValue: median(fileStats.map((s) => s[what])),
      unit: "ms",
      higherIsBetter: false,
    });
    const allFile = statsOf(fileRuns.flat());
    const allHa = statsOf(haRuns.flat());
    const intents = ha.intentAckMs.slice(warmIntents);
    process.stderr.write(
      `ha-eviction pooled (${String(runs * perEviction)} each): HA p50/p90/max ${fmt(allHa.p50)}/${fmt(allHa.p90)}/${fmt(allHa.max)} ms; file ${fmt(allFile.p50)}/${fmt(allFile.p90)}/${fmt(allFile.max)} ms; HA stop-intent ack p50/p90/max ${fmt(median(intents))}/${fmt(percentile(intents, 90))}/${fmt(Math.max(...intents))} ms over ${String(intents.length)}\n`,
    );
    return [
      line("p50", "median"),
      line("p90", "p90"),
      line("max", "max"),
      {
        name: `eviction, all ${String(runs * perEviction)} pooled, median (HA p90 ${fmt(allHa.p90)} max ${fmt(allHa.max)}; file p90 ${fmt(allFile.p90)} max ${fmt(allFile.max)})`,
        baseline: "file journal, same run",
        ours: allHa.p50,
        baselineValue: allFile.p50,
        unit: "ms",
        higherIsBetter: false,
      },
      {
        name: `HA stop-intent append inside the eviction, median of ${String(intents.length)} (p90 ${fmt(percentile(intents, 90))}, max ${fmt(Math.max(...intents))}) vs the whole HA eviction`,
        baseline: "whole HA eviction median",
        ours: median(intents),
        baselineValue: allHa.p50,
        unit: "ms",
        higherIsBetter: false,
      },
    ];
  } finally {
    for (const s of sides.reverse()) await s.close().catch(() => undefined);
    await nc.close();
    await cluster.stop();
  }
}
