import { EvictionReason, type Event } from "@warden/proto";
import type { Cancel, Clock } from "@warden/common";
import type { NodeRecord } from "@warden/cluster";
import type { TraceLine } from "@warden/whatif";
import type { RoutedCallObserver, RoutedCallRecord } from "../routing/routed-call.js";

/** Where taps send lines (TraceRecorder.record). */
export interface TraceSink {
  record(line: TraceLine): void;
  /** One line already as its JSON text (what `record` would write for it); a sink without it takes `record`. */
  recordJson?(json: string): void;
}

/** A number as JSON.stringify writes it (non-finite: null). */
function jsonNumber(n: number): string {
  return Number.isFinite(n) ? String(n) : "null";
}

/** Microseconds whose ms text is built from integers: below 2^43 µs (101 days) every ≤3-decimal value is its own shortest text. */
const exactUs = 2 ** 43;

/** `ms` to the microsecond: what a call line keeps of its wait and hold (the clock's sub-µs digits are noise). */
function toUs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/**
 * The JSON text of `toUs(ms)`, built from integers: a fraction's shortest
 * text is the slow case of number-to-string (about 0.25 µs each, three per
 * routed call), an integer's the fast one. Outside the exact range (and for
 * NaN, ±Infinity) the general path.
 */
function usJson(ms: number): string {
  const us = Math.round(ms * 1000);
  if (!(Math.abs(us) < exactUs)) return jsonNumber(us / 1000);
  const neg = us < 0;
  const abs = neg ? -us : us;
  const whole = Math.floor(abs / 1000);
  const frac = abs - whole * 1000;
  const head = neg ? `-${String(whole)}` : String(whole);
  if (frac === 0) return head;
  // Trailing zeros dropped, as number-to-string does.
  if (frac % 100 === 0) return `${head}.${String(frac / 100)}`;
  if (frac % 10 === 0) return `${head}${frac < 100 ? ".0" : "."}${String(frac / 10)}`;
  return `${head}${frac < 10 ? ".00" : frac < 100 ? ".0" : "."}${String(frac)}`;
}

/**
 * The JSON text JSON.stringify gives a `call` line built in traceCalls'
 * field order (its times as traceCalls keeps them: `at` in whole ms, the wait
 * and hold to the µs), written directly: one per routed call, where building
 * the object with its optional fields and stringifying it was a visible share.
 */
export function callLineJson(at: number, c: RoutedCallRecord): string {
  let json = `{"t":"call","at":${jsonNumber(at)},"m":${JSON.stringify(c.model)},"waitMs":${usJson(c.waitMs)},"durMs":${usJson(c.durMs)},"ok":${c.ok ? "true" : "false"},"cls":${JSON.stringify(c.cls)}`;
  if (c.reqBytes !== undefined) json += `,"reqBytes":${jsonNumber(c.reqBytes)}`;
  if (c.respBytes !== undefined) json += `,"respBytes":${jsonNumber(c.respBytes)}`;
  return `${json}}`;
}

/** "EVICTION_REASON_SCALE_DOWN" → "scale-down", as the watchdog names it. */
function reasonName(r: EvictionReason): string {
  // An unknown number (a newer peer) has no name: String(r) keeps it readable.
  return (EvictionReason[r] as string | undefined ?? String(r)).toLowerCase().replace(/_/g, "-");
}

/**
 * One audit event → at most one trace line: loads (model, node, load time),
 * completed evictions (reason), node joins and losses, operators' policy,
 * scale and node-limit changes. Nothing else of the event is kept (no
 * actor, no address, no error text).
 */
export function traceLineOf(e: Event, at: number): TraceLine | undefined {
  const p = e.payload;
  switch (p.case) {
    case "backendLoaded":
      // An operator's LoadModel names its actor; a replay repeats those loads (the others are its own decisions).
      return { t: "load", at, m: e.model, node: e.nodeId, loadMs: Number(p.value.loadDurationMs), ...(e.actor === "" ? {} : { op: true }) };
    case "evictionStopped":
      // 0: not measured (an orphan's stop), so left out.
      return { t: "stop", at, m: e.model, node: e.nodeId, reason: reasonName(p.value.reason), ...(p.value.stopDurationMs === 0n ? {} : { stopMs: Number(p.value.stopDurationMs) }) };
    case "nodeRegistered":
      return { t: "node", at, node: e.nodeId, ev: "joined" };
    case "nodeUnreachable":
      return { t: "node", at, node: e.nodeId, ev: "unreachable" };
    case "nodeLost":
      return { t: "node", at, node: e.nodeId, ev: "lost" };
    case "nodeDrainStarted":
      // A restarted coordinator resuming a drain is not a new operator action.
      return p.value.resumed ? undefined : { t: "node", at, node: e.nodeId, ev: "drain" };
    case "nodeUndrained":
      return { t: "node", at, node: e.nodeId, ev: "undrain" };
    case "policyUpdated":
      return { t: "admin", at, op: "policy", changes: p.value.changes.slice(0, 64) };
    case "replicaScaleSet":
      return { t: "admin", at, op: "scale", m: e.model, min: p.value.min, max: p.value.max };
    case "nodeLimitsSet": {
      const l = p.value.effective;
      const budget = l?.memoryBudget;
      return {
        t: "admin",
        at,
        op: "limits",
        node: e.nodeId,
        ...(l?.maxReplicasPerModel === undefined ? {} : { maxReplicas: l.maxReplicasPerModel }),
        ...(budget?.case === "memoryBudgetBytes" ? { budgetBytes: Number(budget.value) } : budget?.case === "memoryBudgetPercent" ? { budgetPercent: budget.value } : {}),
      };
    }
    default:
      return undefined;
  }
}

/**
 * Records every routed call as one `call` line when it ends: the routed-calls
 * path (routing/routed-call.ts), which every surface takes (gRPC Inference,
 * the Backend router, the data-plane Predict, HTTP), tells it the model, the
 * caller's priority class, its wait and hold and, where the surface sees the
 * call as bytes, the request and response sizes. Never the request or reply.
 */
export function traceCalls(clock: Clock, sink: TraceSink): RoutedCallObserver {
  return {
    clock,
    callEnded: (c) => {
      // The wall time of its arrival, what a replay schedules it at: whole ms, as the wall clock has them.
      const at = Math.round(clock.wallNow() - c.waitMs - c.durMs);
      if (sink.recordJson !== undefined) {
        sink.recordJson(callLineJson(at, c));
        return;
      }
      sink.record({ t: "call", at, m: c.model, waitMs: toUs(c.waitMs), durMs: toUs(c.durMs), ok: c.ok, cls: c.cls, ...(c.reqBytes === undefined ? {} : { reqBytes: c.reqBytes }), ...(c.respBytes === undefined ? {} : { respBytes: c.respBytes }) });
    },
  };
}

/** What the memory sampler reads of the node table. */
export interface TracedNodes {
  list(): readonly Pick<NodeRecord<unknown>, "nodeId" | "resources">[];
  get(nodeId: string): Pick<NodeRecord<unknown>, "nodeId" | "resources"> | undefined;
}

function memLine(n: Pick<NodeRecord<unknown>, "nodeId" | "resources">, at: number): TraceLine | undefined {
  const r = n.resources;
  if (r === undefined) return undefined;
  let totalBytes = Number(r.ramTotalBytes);
  let usedBytes = Number(r.ramUsedBytes);
  if (r.gpus.length > 0) {
    totalBytes = 0;
    usedBytes = 0;
    for (const g of r.gpus) {
      totalBytes += Number(g.totalBytes);
      usedBytes += Number(g.usedBytes);
    }
  }
  return { t: "mem", at, node: n.nodeId, totalBytes, usedBytes };
}

/**
 * Every `intervalMs` one `mem` line per node with a reading (GPUs summed,
 * RAM without GPUs): rate-limited, proportional to the nodes, off the
 * heartbeat path. `joined(nodeId)` takes one reading of a node that just
 * registered, `joinDelayMs` later (its first heartbeat carries it), so a
 * replay knows the memory of a node that joined between two samples.
 */
export function sampleNodeMemory(nodes: TracedNodes, clock: Clock, sink: TraceSink, intervalMs = 60_000, joinDelayMs = 5_000): { readonly cancel: Cancel; joined(nodeId: string): void } {
  let timer: Cancel | undefined;
  const joins = new Map<string, Cancel>();
  const sample = (): void => {
    const at = clock.wallNow();
    for (const n of nodes.list()) {
      const line = memLine(n, at);
      if (line !== undefined) sink.record(line);
    }
    timer = clock.setTimer(intervalMs, sample);
  };
  // The first reading soon after the start: a short trace still names its nodes' memory.
  timer = clock.setTimer(Math.min(intervalMs, joinDelayMs), sample);
  return {
    cancel: () => {
      timer?.();
      for (const c of joins.values()) c();
      joins.clear();
    },
    joined: (nodeId) => {
      // One pending reading per node: a flapping node does not pile timers up.
      if (joins.has(nodeId)) return;
      joins.set(
        nodeId,
        clock.setTimer(joinDelayMs, () => {
          joins.delete(nodeId);
          const n = nodes.get(nodeId);
          const line = n === undefined ? undefined : memLine(n, clock.wallNow());
          if (line !== undefined) sink.record(line);
        }),
      );
    },
  };
}
