import { invalidArgument } from "@warden/common";

/**
 * The workload trace: JSON lines, each file (segment) starting with a
 * header line. It holds what a replay needs and nothing more — never a
 * prompt, an output or a principal's name. Times (`at`) are wall-clock
 * milliseconds since the Unix epoch; durations end in Ms, sizes in Bytes.
 */
export const traceVersion = 1;
export const traceKind = "warden-trace";

export interface TraceHeader {
  readonly v: typeof traceVersion;
  readonly kind: typeof traceKind;
  /** Where it came from: "coordinator" (recorded) or "synth". */
  readonly source: string;
  readonly at: number;
}

/** One routed call: when it was asked, for which model, how long it waited for an instance and how long it held one. */
export interface CallLine {
  readonly t: "call";
  readonly at: number;
  readonly m: string;
  /** Time from the call's arrival to its lease (a cold start or a full instance makes it long). */
  readonly waitMs: number;
  /** Time the call held its instance. */
  readonly durMs: number;
  /** false: the call got no instance (refused, failed, timed out waiting). */
  readonly ok: boolean;
  /** The caller's priority class (admission); absent: standard (and in traces recorded before it was kept). */
  readonly cls?: CallClass;
  /** Request bytes as they came on the wire (absent where the surface does not see them as bytes). */
  readonly reqBytes?: number;
  /** Response bytes sent back, all replies of a stream summed (absent as reqBytes). */
  readonly respBytes?: number;
}

/** The admission priority classes (@warden/admission's PriorityClass). */
export type CallClass = "critical" | "standard" | "sheddable";

export interface LoadLine {
  readonly t: "load";
  readonly at: number;
  readonly m: string;
  readonly node: string;
  readonly loadMs: number;
  /** true: an operator's LoadModel asked for it (a replay loads it again at that time). */
  readonly op?: boolean;
}

export interface StopLine {
  readonly t: "stop";
  readonly at: number;
  readonly m: string;
  readonly node: string;
  /** The eviction reason: idle, lru, memory, group, busy, admin, drain, config, health, scale-down, … */
  readonly reason: string;
  /** From the eviction's selection to the confirmed stop; absent when not measured (a replay then uses its default). */
  readonly stopMs?: number;
}

export interface NodeLine {
  readonly t: "node";
  readonly at: number;
  readonly node: string;
  readonly ev: NodeEvent;
}

/** A node's change: joined, unreachable, lost (its instances gone), or an operator's drain / undrain. */
export type NodeEvent = "joined" | "unreachable" | "lost" | "drain" | "undrain";
const nodeEvents: readonly NodeEvent[] = ["joined", "unreachable", "lost", "drain", "undrain"];

/** A node's memory (its GPUs summed, or its RAM without GPUs), rate-limited per node. */
export interface MemLine {
  readonly t: "mem";
  readonly at: number;
  readonly node: string;
  readonly totalBytes: number;
  readonly usedBytes: number;
}

/**
 * An operator's change: `policy` (each change `field=<JSON value>`, as the
 * policy.updated event names it), `scale` (a model's replica bounds),
 * `limits` (a node's effective limits after the change).
 */
export interface AdminLine {
  readonly t: "admin";
  readonly at: number;
  readonly op: "policy" | "scale" | "limits";
  readonly changes?: readonly string[];
  readonly m?: string;
  readonly node?: string;
  readonly min?: number;
  readonly max?: number;
  /** limits: replicas of one model the node may hold. */
  readonly maxReplicas?: number;
  /** limits: the memory placement may account on the node (absent: all of it). */
  readonly budgetBytes?: number;
  /** limits: the budget as a percent of the node's memory. */
  readonly budgetPercent?: number;
}

/**
 * Lines the recorder dropped (its buffer was full, or a write failed),
 * written with its next flush: the trace has a gap. `at` is when the first
 * of them was dropped, `lastAt` the last; what they held (calls, loads,
 * stops, …) is not in the trace, so a replay around that time undercounts.
 */
export interface GapLine {
  readonly t: "gap";
  readonly at: number;
  readonly lastAt: number;
  readonly dropped: number;
}

/** At most this many changes in one policy line. */
export const maxTraceChanges = 64;

export type TraceLine = CallLine | LoadLine | StopLine | NodeLine | MemLine | AdminLine | GapLine;

/** Bounds on what a trace line may carry (a trace is input from outside). */
export const maxTraceLineBytes = 4096;
export const maxTraceNameLength = 256;
/** Durations in a trace: at most one day. */
export const maxTraceDurationMs = 86_400_000;

export function traceHeader(source: string, at: number): TraceHeader {
  return { v: traceVersion, kind: traceKind, source, at };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function num(o: Record<string, unknown>, k: string, where: string, max = Number.MAX_SAFE_INTEGER): number {
  const v = o[k];
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || v > max) throw invalidArgument(`${where}.${k}`, `must be a number in [0, ${String(max)}], got ${JSON.stringify(v)}`);
  return v;
}

function optNum(o: Record<string, unknown>, k: string, where: string, max = Number.MAX_SAFE_INTEGER): { [key: string]: number } {
  return o[k] === undefined ? {} : { [k]: num(o, k, where, max) };
}

function name(o: Record<string, unknown>, k: string, where: string): string {
  const v = o[k];
  if (typeof v !== "string" || v === "" || v.length > maxTraceNameLength) throw invalidArgument(`${where}.${k}`, `must be a string of 1 to ${String(maxTraceNameLength)} characters`);
  return v;
}

/**
 * One line of a trace file: a header (returned as such), or a trace line,
 * validated; unknown `t` values are skipped (undefined) so a newer recorder's
 * additions do not break an older replay. Errors name the line (`trace:12.waitMs`).
 */
export function parseTraceLine(text: string, lineNo: number): TraceLine | TraceHeader | undefined {
  const where = `trace:${String(lineNo)}`;
  if (text.length > maxTraceLineBytes) throw invalidArgument(where, `line longer than ${String(maxTraceLineBytes)} characters`);
  let o: unknown;
  try {
    o = JSON.parse(text);
  } catch {
    throw invalidArgument(where, "not a JSON line");
  }
  if (!isRecord(o)) throw invalidArgument(where, "must be a JSON object");
  if (o["kind"] === traceKind) {
    if (o["v"] !== traceVersion) throw invalidArgument(`${where}.v`, `trace version ${JSON.stringify(o["v"])} is not supported (this build reads ${String(traceVersion)})`);
    return { v: traceVersion, kind: traceKind, source: typeof o["source"] === "string" ? o["source"] : "", at: num(o, "at", where) };
  }
  const at = num(o, "at", where);
  switch (o["t"]) {
    case "call": {
      const cls = o["cls"];
      if (cls !== undefined && cls !== "critical" && cls !== "standard" && cls !== "sheddable") throw invalidArgument(`${where}.cls`, `must be critical, standard or sheddable, got ${JSON.stringify(cls)}`);
      return { t: "call", at, m: name(o, "m", where), waitMs: num(o, "waitMs", where, maxTraceDurationMs), durMs: num(o, "durMs", where, maxTraceDurationMs), ok: o["ok"] !== false, ...(cls === undefined ? {} : { cls }), ...optNum(o, "reqBytes", where), ...optNum(o, "respBytes", where) };
    }
    case "load":
      return { t: "load", at, m: name(o, "m", where), node: name(o, "node", where), loadMs: num(o, "loadMs", where, maxTraceDurationMs), ...(o["op"] === true ? { op: true } : {}) };
    case "stop":
      return { t: "stop", at, m: name(o, "m", where), node: name(o, "node", where), reason: name(o, "reason", where), ...optNum(o, "stopMs", where, maxTraceDurationMs) };
    case "node": {
      const ev = o["ev"];
      if (!nodeEvents.includes(ev as NodeEvent)) throw invalidArgument(`${where}.ev`, `must be one of ${nodeEvents.join(", ")}, got ${JSON.stringify(ev)}`);
      return { t: "node", at, node: name(o, "node", where), ev: ev as NodeEvent };
    }
    case "mem":
      return { t: "mem", at, node: name(o, "node", where), totalBytes: num(o, "totalBytes", where), usedBytes: num(o, "usedBytes", where) };
    case "gap":
      return { t: "gap", at, lastAt: num(o, "lastAt", where), dropped: num(o, "dropped", where) };
    case "admin": {
      const op = o["op"];
      if (op !== "policy" && op !== "scale" && op !== "limits") throw invalidArgument(`${where}.op`, `must be policy, scale or limits, got ${JSON.stringify(op)}`);
      if (op === "policy") {
        const ch = o["changes"];
        if (!Array.isArray(ch) || ch.length > maxTraceChanges || !ch.every((c): c is string => typeof c === "string" && c.length <= maxTraceLineBytes)) throw invalidArgument(`${where}.changes`, `must be a list of at most ${String(maxTraceChanges)} strings`);
        return { t: "admin", at, op, changes: ch };
      }
      if (op === "scale") return { t: "admin", at, op, m: name(o, "m", where), ...optNum(o, "min", where, 1024), ...optNum(o, "max", where, 1024) };
      return { t: "admin", at, op, node: name(o, "node", where), ...optNum(o, "maxReplicas", where, 1024), ...optNum(o, "budgetBytes", where), ...optNum(o, "budgetPercent", where, 100) };
    }
    default:
      return undefined;
  }
}

/** Whether a parsed line is a header. */
export function isTraceHeader(l: TraceLine | TraceHeader): l is TraceHeader {
  return "kind" in l;
}
