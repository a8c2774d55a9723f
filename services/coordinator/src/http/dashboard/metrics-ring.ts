import type { CallChange } from "@warden/loader";
import type { Cancel, Clock } from "@warden/common";

/** Samples kept: an hour at the default period (then the oldest goes). */
export const defaultMetricsSamples = 720;
export const defaultMetricsSampleMs = 5_000;
/** Series kept per kind: nodes and models past these (in first-seen order) are not plotted; the response says how many were left out. */
export const maxMetricsNodes = 64;
export const maxMetricsModels = 64;
/** GPU series kept over all nodes (first seen first), and per node: a node's GPUs past these are not plotted. */
export const maxMetricsGpus = 128;
export const maxMetricsGpusPerNode = 8;

/** Latency buckets: bucket i holds durations up to 1.15^i ms (100 buckets reach about 20 minutes; a reading is within 15 %). */
const bucketGrowth = 1.15;
const buckets = 100;
const logGrowth = Math.log(bucketGrowth);

function bucketOf(ms: number): number {
  return ms <= 1 ? 0 : Math.min(buckets - 1, Math.ceil(Math.log(ms) / logGrowth));
}

/** The duration bucket `q` (0..1) of the calls counted falls in, as its upper bound in ms. */
function quantileMs(hist: Uint32Array, count: number, q: number): number {
  const rank = Math.max(1, Math.ceil(q * count));
  let seen = 0;
  for (let i = 0; i < buckets; i++) {
    seen += hist[i] ?? 0;
    if (seen >= rank) return Math.round(bucketGrowth ** i);
  }
  return Math.round(bucketGrowth ** (buckets - 1));
}

/** One GPU's memory as its node's agent last reported it. */
export interface GpuMemorySample {
  readonly index: number;
  readonly usedBytes: number;
  readonly totalBytes: number;
}

/** One node's memory as the sampler reads it. */
export interface NodeMemorySample {
  readonly nodeId: string;
  readonly measuredBytes: number;
  readonly accountedBytes: number;
  /** Each GPU's reading (none on a node without GPUs). */
  readonly gpus?: readonly GpuMemorySample[];
}

/** A model's admission queue now: calls waiting, every class (models without admission have none). */
export interface QueueSample {
  readonly model: string;
  readonly waiting: number;
}

/** A fixed ring of `capacity` numbers (NaN = no value at that sample). */
class Series {
  readonly values: Float64Array;
  constructor(capacity: number) {
    this.values = new Float64Array(capacity).fill(NaN);
  }
}

interface ModelSeries {
  readonly callsPerS: Series;
  readonly p50Ms: Series;
  readonly p99Ms: Series;
  readonly inFlight: Series;
  readonly tokensPerS: Series;
  readonly queued: Series;
  /** Calls ended since the last sample, and their durations' histogram. */
  calls: number;
  /** Completion tokens returned since the last sample. */
  tokens: number;
  readonly hist: Uint32Array;
  /** The latest in-flight count per instance of the model (bounded by its instances). */
  readonly inFlightBy: Map<string, number>;
}

interface NodeSeries {
  readonly measured: Series;
  readonly accounted: Series;
  /** Per GPU index: used bytes at each sample, and the latest total. */
  readonly gpus: Map<number, { readonly used: Series; totalBytes: number }>;
}

/** What GET /api/dashboard/metrics answers: one time axis, each series aligned to it (null = no value). */
export interface MetricsJson {
  readonly sampleMs: number;
  readonly capacity: number;
  /** Wall-clock ms of each sample, oldest first. */
  readonly times: number[];
  readonly nodes: { nodeId: string; measuredBytes: (number | null)[]; accountedBytes: (number | null)[]; gpus: { index: number; totalBytes: number; usedBytes: (number | null)[] }[] }[];
  readonly models: { model: string; callsPerS: (number | null)[]; p50Ms: (number | null)[]; p99Ms: (number | null)[]; inFlight: (number | null)[]; tokensPerS: (number | null)[]; queued: (number | null)[] }[];
  /** Nodes, models and GPUs seen past the caps, not kept. */
  readonly leftOut: { readonly nodes: number; readonly models: number; readonly gpus: number };
}

/**
 * The dashboard's plots, kept in the coordinator: every `sampleMs` one
 * sample of each node's memory (measured by its agent, accounted by Warden)
 * and each of its GPUs' used memory, and of each model's calls per second,
 * latency p50 and p99 (of the calls that ended in the period), calls in
 * flight, completion tokens per second and calls waiting in its admission
 * queue. Memory is fixed: Float64 rings of `capacity` samples for at most
 * 64 nodes, 128 GPUs and 64 models, allocated on first sight, so an hour at
 * 5 s is at most 64 × 2 + 128 + 64 × 6 rings of 720 numbers (about 3.5 MiB).
 * A call costs O(1) (a counter and a histogram bucket); a sample
 * O(nodes + GPUs + models) every period.
 */
export class MetricsRing {
  readonly capacity: number;
  readonly sampleMs: number;
  private readonly times: Float64Array;
  /** Samples written so far (the next one goes at written % capacity). */
  private written = 0;
  private readonly nodes = new Map<string, NodeSeries>();
  private readonly models = new Map<string, ModelSeries>();
  private readonly leftOutNodes = new Set<string>();
  private readonly leftOutModels = new Set<string>();
  /** GPU series kept, over all nodes (capped at maxMetricsGpus), and GPUs left out ("node/index"). */
  private gpuSeries = 0;
  private readonly leftOutGpus = new Set<string>();
  private timer: Cancel | undefined;

  constructor(
    private readonly clock: Clock,
    /** Nodes' memory now; `want` says which nodes the ring keeps (the others are counted, not read). */
    private readonly readNodes: (want: (nodeId: string) => boolean) => readonly NodeMemorySample[],
    o: { readonly capacity?: number; readonly sampleMs?: number } = {},
    /** Calls waiting per model now (the admission gate); absent: no admission, no queue. */
    private readonly readQueues: () => Iterable<QueueSample> = () => [],
  ) {
    this.capacity = o.capacity ?? defaultMetricsSamples;
    this.sampleMs = o.sampleMs ?? defaultMetricsSampleMs;
    this.times = new Float64Array(this.capacity).fill(NaN);
  }

  /** Counts one routed call's change (the CallActivity listener). */
  readonly onCall = (c: CallChange): void => {
    const m = this.modelSeries(c.model);
    if (m === undefined) return;
    if (c.inFlight > 0) m.inFlightBy.set(c.incarnation, c.inFlight);
    else m.inFlightBy.delete(c.incarnation);
    if (c.durationMs === undefined) return;
    m.calls++;
    const b = bucketOf(c.durationMs);
    m.hist[b] = (m.hist[b] ?? 0) + 1;
  };

  /** Counts a call's completion tokens (the CallActivity token listener). */
  readonly onTokens = (model: string, tokens: number): void => {
    const m = this.modelSeries(model);
    if (m === undefined || !Number.isFinite(tokens) || tokens <= 0) return;
    m.tokens += tokens;
  };

  private modelSeries(model: string): ModelSeries | undefined {
    let m = this.models.get(model);
    if (m !== undefined) return m;
    if (this.models.size >= maxMetricsModels) {
      if (this.leftOutModels.size < 10_000) this.leftOutModels.add(model);
      return undefined;
    }
    m = { callsPerS: new Series(this.capacity), p50Ms: new Series(this.capacity), p99Ms: new Series(this.capacity), inFlight: new Series(this.capacity), tokensPerS: new Series(this.capacity), queued: new Series(this.capacity), calls: 0, tokens: 0, hist: new Uint32Array(buckets), inFlightBy: new Map() };
    this.models.set(model, m);
    return m;
  }

  /**
   * Takes a first sample at once, then one every `sampleMs`: the time axis
   * begins when the coordinator does, so a load in its first seconds is marked.
   */
  start(): this {
    if (this.timer !== undefined) return this;
    this.sample();
    this.arm();
    return this;
  }

  private arm(): void {
    this.timer ??= this.clock.setTimer(this.sampleMs, () => {
      this.timer = undefined;
      this.sample();
      this.arm();
    });
  }

  stop(): void {
    this.timer?.();
    this.timer = undefined;
  }

  /** Takes one sample now (the timer's work; tests call it directly). */
  sample(): void {
    const at = this.written % this.capacity;
    this.times[at] = this.clock.wallNow();
    // A node not read this time has no value at this sample (not the one from a lap ago).
    for (const s of this.nodes.values()) {
      s.measured.values[at] = NaN;
      s.accounted.values[at] = NaN;
      for (const g of s.gpus.values()) g.used.values[at] = NaN;
    }
    const want = (nodeId: string): boolean => {
      if (this.nodes.has(nodeId) || this.nodes.size < maxMetricsNodes) return true;
      if (this.leftOutNodes.size < 10_000) this.leftOutNodes.add(nodeId);
      return false;
    };
    for (const n of this.readNodes(want)) {
      let s = this.nodes.get(n.nodeId);
      if (s === undefined) {
        if (this.nodes.size >= maxMetricsNodes) {
          if (this.leftOutNodes.size < 10_000) this.leftOutNodes.add(n.nodeId);
          continue;
        }
        s = { measured: new Series(this.capacity), accounted: new Series(this.capacity), gpus: new Map() };
        this.nodes.set(n.nodeId, s);
      }
      s.measured.values[at] = n.measuredBytes;
      s.accounted.values[at] = n.accountedBytes;
      for (const g of n.gpus ?? []) this.sampleGpu(n.nodeId, s, g, at);
    }
    const waiting = new Map<string, number>();
    for (const q of this.readQueues()) {
      // A model first seen waiting gets its series here (a queue can fill before any call ends).
      if (q.waiting > 0 && this.modelSeries(q.model) !== undefined) waiting.set(q.model, q.waiting);
    }
    for (const [model, m] of this.models) {
      m.callsPerS.values[at] = m.calls / (this.sampleMs / 1_000);
      m.p50Ms.values[at] = m.calls === 0 ? NaN : quantileMs(m.hist, m.calls, 0.5);
      m.p99Ms.values[at] = m.calls === 0 ? NaN : quantileMs(m.hist, m.calls, 0.99);
      let inFlight = 0;
      for (const v of m.inFlightBy.values()) inFlight += v;
      m.inFlight.values[at] = inFlight;
      m.tokensPerS.values[at] = m.tokens / (this.sampleMs / 1_000);
      m.queued.values[at] = waiting.get(model) ?? 0;
      m.tokens = 0;
      m.calls = 0;
      m.hist.fill(0);
    }
    this.written++;
  }

  private sampleGpu(nodeId: string, s: NodeSeries, g: GpuMemorySample, at: number): void {
    let series = s.gpus.get(g.index);
    if (series === undefined) {
      if (s.gpus.size >= maxMetricsGpusPerNode || this.gpuSeries >= maxMetricsGpus) {
        if (this.leftOutGpus.size < 10_000) this.leftOutGpus.add(`${nodeId}/${String(g.index)}`);
        return;
      }
      series = { used: new Series(this.capacity), totalBytes: g.totalBytes };
      s.gpus.set(g.index, series);
      this.gpuSeries++;
    }
    series.used.values[at] = g.usedBytes;
    series.totalBytes = g.totalBytes;
  }

  /** The kept samples, oldest first. */
  toJson(): MetricsJson {
    const n = Math.min(this.written, this.capacity);
    const first = this.written - n;
    const idx = Array.from({ length: n }, (_, i) => (first + i) % this.capacity);
    const col = (s: Series): (number | null)[] => idx.map((i) => {
      const v = s.values[i] ?? NaN;
      return Number.isNaN(v) ? null : v;
    });
    return {
      sampleMs: this.sampleMs,
      capacity: this.capacity,
      times: idx.map((i) => this.times[i] ?? 0),
      nodes: [...this.nodes].map(([nodeId, s]) => ({ nodeId, measuredBytes: col(s.measured), accountedBytes: col(s.accounted), gpus: [...s.gpus].map(([index, g]) => ({ index, totalBytes: g.totalBytes, usedBytes: col(g.used) })) })),
      models: [...this.models].map(([model, m]) => ({ model, callsPerS: col(m.callsPerS), p50Ms: col(m.p50Ms), p99Ms: col(m.p99Ms), inFlight: col(m.inFlight), tokensPerS: col(m.tokensPerS), queued: col(m.queued) })),
      leftOut: { nodes: this.leftOutNodes.size, models: this.leftOutModels.size, gpus: this.leftOutGpus.size },
    };
  }
}
