import type { AdmissionSettings } from "@warden/admission";
import { abortReason, createUlidFactory, deadlineSignal, seededRng, sleep } from "@warden/common";
import { Loader, type LoaderEvent, type ModelSpec } from "@warden/loader";
import { PlacementView } from "@warden/cluster";
import type { PlacementStrategy } from "@warden/placement";
import type { PolicyPatch } from "@warden/watchdog";
import { EventQueue } from "./event-queue.js";
import { VirtualClock } from "./virtual-clock.js";
import { ReplayMeter, type ReplayReport } from "./replay-meter.js";
import { ReplayCluster, ReplayNode, replayBackends } from "./replay-world.js";
import { applyTimeline, isTimelineLine, type TimelineCounts, type TimelineLine } from "./replay-timeline.js";
import type { CallClass, CallLine, GapLine, TraceLine } from "./trace-format.js";

/** The config a replay runs under: the coordinator config's decision parts, already validated by its parser. */
export interface ReplayConfig {
  readonly models: readonly ModelSpec[];
  readonly policy: PolicyPatch;
  readonly placement: PlacementStrategy;
  readonly enforcement: { readonly maxAttempts: number; readonly intervalMs: number };
  readonly cooldown: { readonly baseMs: number; readonly maxMs: number };
  readonly stop: { readonly stopTimeoutMs: number; readonly freeTimeoutMs: number; readonly stopRpcTimeoutMs: number };
  readonly loadWaitMs: number;
  /** Models with `admission:` settings (their calls go through the admission gate by class); absent: none. */
  readonly admission?: ReadonlyMap<string, AdmissionSettings>;
}

/** The admission gate a replay puts calls through (the coordinator's AdmissionGate, injected: it lives with the coordinator). */
export interface ReplayGate {
  gates(model: string): boolean;
  enter(model: string, caller: { readonly cls: CallClass; readonly principal: string }, signal: AbortSignal): Promise<() => void>;
}

/** Makes the gate over the replay's world: the model's settings, and its replicas now (ready or loading). */
export type ReplayGateFactory = (ports: { settingsOf(model: string): AdmissionSettings | undefined; replicasOf(model: string): number }) => ReplayGate;

export interface ReplayOptions {
  /** Load time of a model the trace recorded no load for. @default 10000 */
  readonly defaultLoadMs?: number;
  /** How long a graceful stop of a model takes on the simulated agent when the trace recorded no stop time for it. @default 1000 */
  readonly stopMs?: number;
  /** How long a call waits for an instance before it fails (the caller's deadline). @default 120000 */
  readonly callDeadlineMs?: number;
  /** Seeds incarnation ids and the loader's jitter. @default 1 */
  readonly seed?: number;
  /** Puts calls of models with `admission:` through this gate, each at its recorded class; absent: no admission. */
  readonly admissionGate?: ReplayGateFactory;
  /** Policy fields the candidate holds: recorded operator changes to them are not applied (a sweep's axes). */
  readonly keepPolicyFields?: ReadonlySet<string>;
  /** Whether recorded operator changes, drains, node losses, LoadModel and UnloadModel happen at their times. @default true */
  readonly timeline?: boolean;
  /** Ends the replay early with the signal's reason (checked between events). */
  readonly signal?: AbortSignal;
}

/** At most this many lines in one replay (a week at about 8 calls a second). */
export const maxReplayLines = 5_000_000;

/** The trace's view a replay needs: calls in arrival order, nodes with their memory, recorded load times, the timeline. */
export interface ReplayInput {
  readonly calls: readonly CallLine[];
  readonly nodes: ReadonlyMap<string, number>;
  readonly loadMs: ReadonlyMap<string, number>;
  /** Each model's median recorded stop time (stop lines that carry one). */
  readonly stopMs: ReadonlyMap<string, number>;
  readonly startAt: number;
  /** Node changes and operator actions in time order (replay-timeline.ts). */
  readonly timeline: readonly TimelineLine[];
  /** Nodes whose first node line is a join: absent until then. */
  readonly joinLater: ReadonlySet<string>;
  /** Where the recorder dropped lines (gap lines), in time order: the replay misses what they held. */
  readonly gaps: readonly GapLine[];
}

function median(xs: number[]): number {
  xs.sort((a, b) => a - b);
  return xs[Math.floor((xs.length - 1) / 2)] ?? 0;
}

/**
 * What a replay takes from a trace: the calls (sorted by arrival: the
 * recorder writes a call when it ends), every node seen with its largest
 * memory reading, and each model's median recorded load and stop times.
 */
export function replayInput(lines: Iterable<TraceLine>): ReplayInput {
  const calls: CallLine[] = [];
  const gaps: GapLine[] = [];
  const timeline: TimelineLine[] = [];
  const firstNodeLine = new Map<string, string>();
  const nodes = new Map<string, number>();
  const loads = new Map<string, number[]>();
  const stops = new Map<string, number[]>();
  let startAt = Number.POSITIVE_INFINITY;
  for (const l of lines) {
    if (l.at < startAt) startAt = l.at;
    // An operator's load was asked for loadMs before it was recorded (when it became ready).
    if (isTimelineLine(l)) timeline.push(l.t === "load" ? { ...l, at: Math.max(0, l.at - l.loadMs) } : l);
    if (l.t === "node" && !firstNodeLine.has(l.node)) firstNodeLine.set(l.node, l.ev);
    if (l.t === "call") calls.push(l);
    else if (l.t === "gap") gaps.push(l);
    else if (l.t === "mem") nodes.set(l.node, Math.max(nodes.get(l.node) ?? 0, l.totalBytes));
    else if (l.t === "node" && !nodes.has(l.node)) nodes.set(l.node, 0);
    else if (l.t === "load") {
      const xs = loads.get(l.m) ?? [];
      xs.push(l.loadMs);
      loads.set(l.m, xs);
    } else if (l.t === "stop" && l.stopMs !== undefined) {
      const xs = stops.get(l.m) ?? [];
      xs.push(l.stopMs);
      stops.set(l.m, xs);
    }
  }
  calls.sort((a, b) => a.at - b.at);
  // Stable: lines of one millisecond keep the order they were recorded in.
  timeline.sort((a, b) => a.at - b.at);
  const joinLater = new Set([...firstNodeLine].filter(([, ev]) => ev === "joined").map(([n]) => n));
  return { calls, nodes, loadMs: new Map([...loads].map(([m, xs]) => [m, median(xs)])), stopMs: new Map([...stops].map(([m, xs]) => [m, median(xs)])), startAt: Number.isFinite(startAt) ? startAt : 0, timeline, joinLater, gaps: gaps.sort((a, b) => a.at - b.at) };
}

/** One macrotask turn: the decision code's promise chains settle before the next virtual event. */
function drainMicrotasks(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * Replays the trace's calls through the production Loader (with its
 * watchdog core and replica reconciler) and PlacementView (the pure
 * planner) under `config`, on virtual time, against simulated agents on the
 * trace's nodes. Calls arrive at their recorded times and hold their
 * instance for their recorded duration; everything else — which loads,
 * where, what gets evicted and why — is the decision code's.
 */
export async function replayTrace(input: ReplayInput, config: ReplayConfig, options: ReplayOptions = {}): Promise<ReplayReport> {
  const queue = new EventQueue();
  const clock = new VirtualClock(queue);
  const rng = seededRng(options.seed ?? 1);
  const sizes = new Map(config.models.map((m) => [m.id, m.sizeBytes]));
  const meter = new ReplayMeter(sizes);
  const known = new Set(config.models.map((m) => m.id));
  const cluster = new ReplayCluster();
  const defaultLoadMs = options.defaultLoadMs ?? 10_000;
  // The nodes report memory to the loader, which is made after them.
  const ref: { loader?: Loader } = {};
  for (const [nodeId, totalBytes] of input.nodes) {
    meter.addNode(nodeId, totalBytes, 0);
    const node = new ReplayNode(nodeId, totalBytes, clock, (m) => input.loadMs.get(m) ?? defaultLoadMs, (m) => input.stopMs.get(m) ?? options.stopMs ?? 1_000, meter, (id, used) => {
      ref.loader?.reportMemory(id, { gpus: [], ram: { totalBytes, usedBytes: used } });
    });
    // A node the trace saw join is not there before it did (unless the timeline is off: then every node is there throughout).
    if (options.timeline !== false && input.joinLater.has(nodeId)) node.state = "lost";
    cluster.add(node);
  }
  const placement = new PlacementView(cluster, config.placement);
  const sink = {
    emit: (e: LoaderEvent): void => {
      if (e.type === "eviction.stopped") meter.evicted(e.reason);
    },
    emitDurable: (e: LoaderEvent): Promise<void> => {
      sink.emit(e);
      return Promise.resolve();
    },
  };
  const l = new Loader({
    clock,
    rng,
    sleep: (ms, signal) => sleep(clock, ms, signal),
    agents: cluster,
    backends: replayBackends,
    journal: { recordStopIntent: () => Promise.resolve(), clearStopIntent: () => Promise.resolve() },
    events: sink,
    placement,
    inventories: cluster,
    mintIncarnation: createUlidFactory(clock, rng),
    models: config.models,
    policy: config.policy,
    stop: config.stop,
    enforcement: config.enforcement,
    cooldown: config.cooldown,
    loadWaitMs: config.loadWaitMs,
  });
  ref.loader = l;
  placement.attach(l);
  for (const [nodeId, totalBytes] of input.nodes) l.reportMemory(nodeId, { gpus: [], ram: { totalBytes, usedBytes: 0 } });
  l.startTicking();
  const admission = config.admission;
  const gate = options.admissionGate === undefined || admission === undefined || admission.size === 0 ? undefined : options.admissionGate({ settingsOf: (m) => admission.get(m), replicasOf: (m) => {
    const st = l.replicaStatus(m);
    return st === undefined ? 0 : st.ready + st.loading;
  } });
  const deadlineMs = options.callDeadlineMs ?? 120_000;
  let open = 0;
  const call = async (c: CallLine, n: number): Promise<void> => {
    if (!known.has(c.m)) {
      meter.refused();
      return;
    }
    open++;
    const arrived = clock.now();
    const dl = deadlineSignal(clock, deadlineMs, "call");
    let release: (() => void) | undefined;
    try {
      // The trace keeps no principal: each call is its own (per-principal bounds and turns are not replayed).
      if (gate?.gates(c.m) === true) release = await gate.enter(c.m, { cls: c.cls ?? "standard", principal: String(n) }, dl.signal);
      const lease = await l.acquire(c.m, dl.signal);
      meter.leased(lease.incarnation, clock.now() - arrived, clock.now());
      await sleep(clock, c.durMs);
      meter.released(lease.incarnation, clock.now());
      lease.complete();
    } catch {
      meter.refused();
    } finally {
      release?.();
      dl.cleanup();
      open--;
    }
  };
  const counts: TimelineCounts = { applied: 0, refused: 0, kept: 0 };
  const keep = options.keepPolicyFields ?? new Set<string>();
  const timeline = options.timeline === false ? [] : input.timeline;
  // Calls and the timeline are merged and scheduled one ahead, so the queue
  // holds timers, not the whole trace; at one time the timeline goes first
  // (a node that joined at the trace's start takes its first call).
  let next = 0;
  let nextT = 0;
  let fired = 0;
  const scheduleNext = (): void => {
    const c = input.calls[next];
    const t = timeline[nextT];
    if (t !== undefined && (c === undefined || t.at <= c.at)) {
      nextT++;
      queue.push(Math.max(0, t.at - input.startAt), "timeline", () => {
        applyTimeline(t, { loader: l, cluster, clock, keep, n: counts });
        scheduleNext();
      });
      return;
    }
    if (c === undefined) return;
    next++;
    queue.push(c.at - input.startAt, "call", () => {
      void call(c, fired++);
      scheduleNext();
    });
  };
  scheduleNext();
  // The replay ends when the last call has ended (it may wait for a load or room, up to its deadline).
  for (;;) {
    if (fired >= input.calls.length && open === 0) break;
    if (options.signal?.aborted === true) {
      l.close();
      throw abortReason(options.signal);
    }
    const at = queue.peekAtMs();
    if (at === undefined) break;
    const e = queue.pop();
    if (e === undefined) continue;
    clock.advanceTo(at);
    e.fn();
    await drainMicrotasks();
  }
  const endAt = clock.now();
  const report = meter.report(0, endAt);
  l.close();
  return { ...report, operatorChanges: counts };
}
