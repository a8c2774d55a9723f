import { leaseConfig, type LeaseConfig } from "./lease-config.js";
import { initialLease, isLeaderAt, nextLease } from "./lease-core.js";
import type { LeaseEffect, LeaseInput, LeaseState } from "./lease-state.js";

/**
 * A seeded model of two or three coordinators sharing one compare-and-set
 * key, for the property test: drifting clocks, late timers, slow, lost and
 * unanswered writes, late watch deliveries, pauses and crashes. Time here is
 * the simulation's "real" time; each node sees only its own clock.
 */
export interface LeaseSimOptions {
  readonly seed: number;
  readonly nodes: number;
  /** Per-node clock rate error, each in [-maxDrift, maxDrift]. */
  readonly driftRates: readonly number[];
  readonly clockOffsetsMs: readonly number[];
  /** Probability that a write is not applied (no quorum) / that its answer is lost. */
  readonly dropWriteP: number;
  readonly loseAckP: number;
  /** Per node: [startMs, durationMs] pauses (SIGSTOP); Infinity duration is a crash. */
  readonly pauses: readonly (readonly [number, number, number])[];
  readonly durationMs: number;
}

export interface LeaseSimResult {
  /** Real times at which two nodes could act as leader at once. */
  readonly overlaps: readonly string[];
  /** become-leader epochs in the order they happened. */
  readonly epochs: readonly number[];
  readonly events: number;
}

/** mulberry32: the simulation's own seeded generator (the decision code takes none). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type SimEventInit =
  | { readonly at: number; readonly node: number; readonly kind: "input"; readonly input: (nowMs: number) => LeaseInput; readonly writeId?: number }
  | { readonly at: number; readonly node: number; readonly kind: "tick"; readonly gen: number }
  | { readonly at: number; readonly node: number; readonly kind: "arrive"; readonly writeId: number; readonly effect: LeaseEffect };
type SimEvent = SimEventInit & { readonly seq: number };

function at<T>(xs: readonly T[], i: number): T {
  const v = xs[i];
  if (v === undefined) throw new RangeError(`no element ${String(i)}`);
  return v;
}

interface SimNode {
  readonly config: LeaseConfig;
  state: LeaseState;
  tickGen: number;
  /** The write the adapter is waiting on; other answers are dropped, as the adapter drops late ones. */
  pendingWriteId: number | undefined;
  lastWatchAt: number;
}

export function runLeaseSim(o: LeaseSimOptions): LeaseSimResult {
  const rand = rng(o.seed);
  const between = (lo: number, hi: number): number => lo + rand() * (hi - lo);
  const opTimeoutMs = 1_000;
  const queue: SimEvent[] = [];
  let seq = 0;
  const push = (e: SimEventInit): void => {
    const ev: SimEvent = { ...e, seq: seq++ };
    // Appends are the common case (time moves forward), so search from the end.
    let i = queue.length;
    while (i > 0 && at(queue, i - 1).at > ev.at) i--;
    queue.splice(i, 0, ev);
  };
  const local = (n: number, t: number): number => at(o.clockOffsetsMs, n) + t * (1 + at(o.driftRates, n));
  const realOf = (n: number, localMs: number): number => (localMs - at(o.clockOffsetsMs, n)) / (1 + at(o.driftRates, n));
  const pausedUntil = (n: number, t: number): number => {
    for (const [pn, start, dur] of o.pauses) if (pn === n && t >= start && t < start + dur) return start + dur;
    return t;
  };

  const key = { revision: 0, holder: null as string | null };
  let streamSeq = 0;
  let writeIds = 0;
  const nodes: SimNode[] = [];
  const overlaps: string[] = [];
  const epochs: number[] = [];
  let events = 0;

  const deliverWatch = (n: number, fromMs: number): void => {
    // Per-node in-order delivery, like one ordered consumer.
    const node = at(nodes, n);
    const t = Math.max(fromMs + between(0, 300), node.lastWatchAt);
    node.lastWatchAt = t;
    const snap = { ...key };
    push({ at: t, node: n, kind: "input", input: (nowMs) => ({ kind: "entry", revision: snap.revision, holder: snap.holder, nowMs }) });
  };

  const apply = (n: number, now: number, effects: readonly LeaseEffect[], wakeAtMs: number | undefined): void => {
    const node = at(nodes, n);
    for (const e of effects) {
      switch (e.kind) {
        case "create":
        case "update": {
          const writeId = ++writeIds;
          node.pendingWriteId = writeId;
          push({ at: now + between(0, 400), node: n, kind: "arrive", writeId, effect: e });
          push({ at: now + opTimeoutMs, node: n, kind: "input", writeId, input: (nowMs) => ({ kind: "write-failed", nowMs }) });
          break;
        }
        case "watch":
          deliverWatch(n, now);
          break;
        case "become-leader":
          epochs.push(e.epoch);
          break;
        case "step-down":
          break;
      }
    }
    node.tickGen++;
    if (wakeAtMs !== undefined) {
      const at = Math.max(now, realOf(n, wakeAtMs)) + between(0, 200); // a loaded machine fires timers late
      push({ at, node: n, kind: "tick", gen: node.tickGen });
    }
  };

  for (let n = 0; n < o.nodes; n++) {
    const first = initialLease();
    nodes.push({ config: leaseConfig(`node-${n}`), state: first.state, tickGen: 0, pendingWriteId: undefined, lastWatchAt: 0 });
    apply(n, 0, first.effects, first.wakeAtMs);
  }

  const checkOverlap = (t: number): void => {
    const leading = nodes.map((nd, i) => (isLeaderAt(nd.config, nd.state, local(i, t)) ? i : -1)).filter((i) => i >= 0);
    if (leading.length > 1) overlaps.push(`t=${t.toFixed(1)} nodes ${leading.join(",")}`);
  };

  while (queue.length > 0) {
    const ev = queue.shift();
    if (ev === undefined) break;
    if (ev.at > o.durationMs) break;
    events++;
    if (ev.kind === "arrive") {
      // The store is up while the node is paused: an already-sent write still lands.
      const e = ev.effect;
      const dropped = rand() < o.dropWriteP;
      let answer: (nowMs: number) => LeaseInput;
      if (dropped) {
        answer = (nowMs) => ({ kind: "write-failed", nowMs });
      } else if ((e.kind === "create" && key.revision === 0) || (e.kind === "update" && key.revision === e.expectedRevision)) {
        streamSeq++;
        key.revision = streamSeq;
        key.holder = at(nodes, ev.node).config.holder;
        const rev = streamSeq;
        answer = (nowMs) => ({ kind: "write-ok", revision: rev, nowMs });
        for (let m = 0; m < o.nodes; m++) deliverWatch(m, ev.at);
      } else {
        answer = (nowMs) => ({ kind: "write-wrong-revision", nowMs });
      }
      if (dropped || rand() >= o.loseAckP) push({ at: ev.at + between(0, 400), node: ev.node, kind: "input", writeId: ev.writeId, input: answer });
      continue;
    }
    const resume = pausedUntil(ev.node, ev.at);
    if (resume > ev.at) {
      if (Number.isFinite(resume)) push({ ...ev, at: resume });
      continue;
    }
    const node = at(nodes, ev.node);
    let input: LeaseInput;
    if (ev.kind === "tick") {
      if (ev.gen !== node.tickGen) continue;
      input = { kind: "tick", nowMs: local(ev.node, ev.at) };
    } else {
      if (ev.writeId !== undefined) {
        if (ev.writeId !== node.pendingWriteId) continue; // already answered (or timed out)
        node.pendingWriteId = undefined;
      }
      input = ev.input(local(ev.node, ev.at));
    }
    const s = nextLease(node.config, node.state, input);
    node.state = s.state;
    apply(ev.node, ev.at, s.effects, s.wakeAtMs);
    checkOverlap(ev.at);
  }
  return { overlaps, epochs, events };
}
