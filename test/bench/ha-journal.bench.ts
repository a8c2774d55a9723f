/**
 * Stop-intent append cost with HA against the single-machine journal, same run:
 * the JetStream journal (R3 on a local 3-server cluster: acked once 2 of 3
 * servers have it) against the file journal (fdatasync per batch).
 *
 * (a) latency of sequential appends (each awaited before the next): median and p99;
 * (b) appends/s with 64 concurrent appenders (group commit on both sides).
 *
 * Three interleaved rounds; each line reports the median round and, in its
 * name, every round's figure (the machine is shared, so the spread matters).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectAudit } from "@warden/audit";
import { openFileJournal } from "@warden/journal";
import type { Journal, JournalRecord } from "@warden/outbox";
import { openJetStreamJournal } from "../../services/coordinator/src/ha/jetstream-journal.js";
import { startNatsCluster } from "../support/nats-cluster.js";
import { median, throughput, type BenchResult } from "./bench-result.js";

const rounds = 3;
const sequentialAppends = 300;
const concurrency = 64;
const throughputMs = 2_000;

let n = 0;
const intent = (): JournalRecord => ({
  kind: "stop-intent",
  incarnation: `01JXT21Q0001ZPGCE7HQ${String(n++).padStart(6, "0")}`,
  nodeId: "gpu-node-17",
  model: "llama-3-8b-instruct",
  address: "10.0.3.17:41235",
  reason: "lru",
  recordedAtMs: 1_750_000_000_000 + n,
});

function percentile(values: readonly number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length * p) / 100))] ?? 0;
}

async function sequential(j: Journal): Promise<{ p50: number; p99: number }> {
  const ms: number[] = [];
  for (let i = 0; i < sequentialAppends; i++) {
    const t = performance.now();
    await j.append(intent());
    ms.push(performance.now() - t);
  }
  return { p50: median(ms), p99: percentile(ms, 99) };
}

interface Round {
  p50: number;
  p99: number;
  perSec: number;
}

async function measure(j: Journal): Promise<Round> {
  const { p50, p99 } = await sequential(j);
  const perSec = await throughput(throughputMs, concurrency, () => j.append(intent()));
  return { p50, p99, perSec };
}

const fmt = (v: number): string => v.toPrecision(3);

export async function run(): Promise<BenchResult[]> {
  const cluster = await startNatsCluster();
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-ha-journal-"));
  const nc = await connectAudit({ servers: [...cluster.urls], reconnectTimeWaitMs: 100 });
  try {
    // Compaction off the measured path: the bench measures appends, not purges.
    const js = await openJetStreamJournal(nc, { stream: "BENCH_JOURNAL", subject: "bench.journal", replicas: 3, compactAtRecords: 10_000_000 });
    await js.replay();
    const file = await openFileJournal({ path: join(dir, "journal.wj"), compactAtBytes: 1024 ** 3 });
    await file.replay();
    await measure(js); // warm-up (JIT, stream files, raft)
    await measure(file);
    const jsRounds: Round[] = [];
    const fileRounds: Round[] = [];
    for (let r = 0; r < rounds; r++) {
      jsRounds.push(await measure(js));
      fileRounds.push(await measure(file));
    }
    await file.close();
    js.close();
    const line = (what: keyof Round, label: string, unit: string, higherIsBetter: boolean): BenchResult => ({
      name: `${label} (JetStream R3 rounds ${jsRounds.map((x) => fmt(x[what])).join("/")}; file ${fileRounds.map((x) => fmt(x[what])).join("/")})`,
      baseline: "file journal, fdatasync",
      ours: median(jsRounds.map((x) => x[what])),
      baselineValue: median(fileRounds.map((x) => x[what])),
      unit,
      higherIsBetter,
    });
    return [
      line("p50", `stop-intent append, sequential, median of ${String(sequentialAppends)}`, "ms", false),
      line("p99", `stop-intent append, sequential, p99 of ${String(sequentialAppends)}`, "ms", false),
      line("perSec", `stop-intent appends/s, ${String(concurrency)} concurrent, ${String(throughputMs)} ms`, "appends/s", true),
    ];
  } finally {
    await nc.close();
    await cluster.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
