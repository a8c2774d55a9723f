/** What a replay measured: one side of `warden policy simulate`'s comparison. */
export interface ReplayReport {
  readonly calls: number;
  /** Loads started (each one a cold start). */
  readonly coldStarts: number;
  readonly coldStartsByModel: Readonly<Record<string, number>>;
  /** Calls that waited for an instance (a load, or room for one). */
  readonly callsWaited: number;
  readonly waitP50Ms: number;
  readonly waitP99Ms: number;
  readonly evictionsByReason: Readonly<Record<string, number>>;
  /** Calls that got no instance (refused, no room, unknown model, timed out). */
  readonly failedCalls: number;
  readonly nodes: readonly NodeMemoryReport[];
  /** Hours instances spent ready with no call in flight (each instance holds its GPU memory meanwhile). */
  readonly idleInstanceHours: number;
  /** Seconds instances existed (loading or ready), summed. */
  readonly replicaSeconds: number;
  /** Trace time replayed. */
  readonly spanMs: number;
  /** The trace's node changes and operator actions the replay applied, refused, or kept the candidate's value over (replay-timeline.ts). */
  readonly operatorChanges?: { readonly applied: number; readonly refused: number; readonly kept: number };
}

/** One node's memory over a replay (a single pool: the models' memory estimates of what it held). */
export interface NodeMemoryReport {
  readonly nodeId: string;
  readonly totalBytes: number;
  readonly peakBytes: number;
  readonly meanBytes: number;
  /** What each model held on the node when it first reached its peak (models holding none left out): what a change of peak is attributed to. */
  readonly peakByModel: Readonly<Record<string, number>>;
}

interface Inst {
  readonly model: string;
  readonly startedAt: number;
  open: number;
  /** Ready and idle since then; undefined while loading or busy. */
  idleSince: number | undefined;
}

interface NodeMem {
  totalBytes: number;
  used: number;
  since: number;
  peak: number;
  area: number;
  /** Bytes each model holds now. */
  readonly byModel: Map<string, number>;
  peakByModel: Map<string, number>;
}

/** Nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] ?? 0;
}

/**
 * Counts what the replay's decisions did, from the simulated agents (starts,
 * ready, stops, memory), the loader's events (evictions) and the calls
 * (waits, leases). Work per event is O(1).
 */
export class ReplayMeter {
  private readonly insts = new Map<string, Inst>();
  private readonly mem = new Map<string, NodeMem>();
  private readonly coldByModel = new Map<string, number>();
  private readonly evictions = new Map<string, number>();
  private readonly waits: number[] = [];
  private idleMs = 0;
  private aliveMs = 0;
  private cold = 0;
  calls = 0;
  failed = 0;

  constructor(private readonly sizes: ReadonlyMap<string, number>) {}

  sizeOf(model: string): number {
    return this.sizes.get(model) ?? 0;
  }

  addNode(nodeId: string, totalBytes: number, at: number): void {
    this.mem.set(nodeId, { totalBytes, used: 0, since: at, peak: 0, area: 0, byModel: new Map(), peakByModel: new Map() });
  }

  /** `model` took (`deltaBytes` > 0) or gave back memory on the node. A new peak copies what each model holds (a few entries: what fits on one node). */
  memory(nodeId: string, model: string, deltaBytes: number, at: number): void {
    const m = this.mem.get(nodeId);
    if (m === undefined) return;
    m.area += m.used * (at - m.since);
    m.used += deltaBytes;
    m.since = at;
    const held = (m.byModel.get(model) ?? 0) + deltaBytes;
    if (held > 0) m.byModel.set(model, held);
    else m.byModel.delete(model);
    if (m.used > m.peak) {
      m.peak = m.used;
      m.peakByModel = new Map(m.byModel);
    }
  }

  started(incarnation: string, model: string, at: number): void {
    this.cold++;
    this.coldByModel.set(model, (this.coldByModel.get(model) ?? 0) + 1);
    this.insts.set(incarnation, { model, startedAt: at, open: 0, idleSince: undefined });
  }

  ready(incarnation: string, at: number): void {
    const i = this.insts.get(incarnation);
    if (i !== undefined && i.open === 0) i.idleSince = at;
  }

  stopped(incarnation: string, at: number): void {
    const i = this.insts.get(incarnation);
    if (i === undefined) return;
    this.insts.delete(incarnation);
    if (i.idleSince !== undefined) this.idleMs += at - i.idleSince;
    this.aliveMs += at - i.startedAt;
  }

  leased(incarnation: string, waitedMs: number, at: number): void {
    this.calls++;
    if (waitedMs > 0) this.waits.push(waitedMs);
    const i = this.insts.get(incarnation);
    if (i === undefined) return;
    if (i.open === 0 && i.idleSince !== undefined) this.idleMs += at - i.idleSince;
    i.idleSince = undefined;
    i.open++;
  }

  released(incarnation: string, at: number): void {
    const i = this.insts.get(incarnation);
    if (i === undefined) return;
    i.open = Math.max(0, i.open - 1);
    if (i.open === 0) i.idleSince = at;
  }

  refused(): void {
    this.calls++;
    this.failed++;
  }

  evicted(reason: string): void {
    this.evictions.set(reason, (this.evictions.get(reason) ?? 0) + 1);
  }

  /** Closes every open interval at `endAt` and reports; `startAt` is when the trace began. */
  report(startAt: number, endAt: number): ReplayReport {
    let idleMs = this.idleMs;
    let aliveMs = this.aliveMs;
    for (const i of this.insts.values()) {
      if (i.idleSince !== undefined) idleMs += endAt - i.idleSince;
      aliveMs += endAt - i.startedAt;
    }
    const span = Math.max(1, endAt - startAt);
    const waits = [...this.waits].sort((a, b) => a - b);
    return {
      calls: this.calls,
      coldStarts: this.cold,
      coldStartsByModel: Object.fromEntries([...this.coldByModel].sort(([a], [b]) => a.localeCompare(b))),
      callsWaited: waits.length,
      waitP50Ms: percentile(waits, 50),
      waitP99Ms: percentile(waits, 99),
      evictionsByReason: Object.fromEntries([...this.evictions].sort(([a], [b]) => a.localeCompare(b))),
      failedCalls: this.failed,
      nodes: [...this.mem].map(([nodeId, m]) => ({ nodeId, totalBytes: m.totalBytes, peakBytes: m.peak, meanBytes: Math.round((m.area + m.used * (endAt - m.since)) / span), peakByModel: Object.fromEntries([...m.peakByModel].sort(([a], [b]) => a.localeCompare(b))) })),
      idleInstanceHours: idleMs / 3_600_000,
      replicaSeconds: aliveMs / 1000,
      spanMs: endAt - startAt,
    };
  }
}
