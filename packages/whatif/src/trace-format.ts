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
}

export interface LoadLine {
  readonly t: "load";
  readonly at: number;
  readonly m: string;
  readonly node: string;
  readonly loadMs: number;
}

export interface StopLine {
  readonly t: "stop";
  readonly at: number;
  readonly m: string;
  readonly node: string;
  /** The eviction reason: idle, lru, memory, group, busy, admin, drain, config, health, scale-down, … */
  readonly reason: string;
}

export interface NodeLine {
  readonly t: "node";
  readonly at: number;
  readonly node: string;
  readonly ev: "joined" | "unreachable" | "lost";
}

/** A node's memory (its GPUs summed, or its RAM without GPUs), rate-limited per node. */
export interface MemLine {
  readonly t: "mem";
  readonly at: number;
  readonly node: string;
  readonly totalBytes: number;
  readonly usedBytes: number;
}

/** An operator's change: `policy` (the changed fields), `scale` (a model's replica bounds), `limits` (a node's). */
export interface AdminLine {
  readonly t: "admin";
  readonly at: number;
  readonly op: "policy" | "scale" | "limits";
  readonly changes?: readonly string[];
  readonly m?: string;
  readonly node?: string;
  readonly min?: number;
  readonly max?: number;
}

export type TraceLine = CallLine | LoadLine | StopLine | NodeLine | MemLine | AdminLine;

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
    case "call":
      return { t: "call", at, m: name(o, "m", where), waitMs: num(o, "waitMs", where, maxTraceDurationMs), durMs: num(o, "durMs", where, maxTraceDurationMs), ok: o["ok"] !== false };
    case "load":
      return { t: "load", at, m: name(o, "m", where), node: name(o, "node", where), loadMs: num(o, "loadMs", where, maxTraceDurationMs) };
    case "stop":
      return { t: "stop", at, m: name(o, "m", where), node: name(o, "node", where), reason: name(o, "reason", where) };
    case "node": {
      const ev = o["ev"];
      if (ev !== "joined" && ev !== "unreachable" && ev !== "lost") throw invalidArgument(`${where}.ev`, `must be joined, unreachable or lost, got ${JSON.stringify(ev)}`);
      return { t: "node", at, node: name(o, "node", where), ev };
    }
    case "mem":
      return { t: "mem", at, node: name(o, "node", where), totalBytes: num(o, "totalBytes", where), usedBytes: num(o, "usedBytes", where) };
    case "admin": {
      const op = o["op"];
      if (op !== "policy" && op !== "scale" && op !== "limits") throw invalidArgument(`${where}.op`, `must be policy, scale or limits, got ${JSON.stringify(op)}`);
      return { t: "admin", at, op };
    }
    default:
      return undefined;
  }
}

/** Whether a parsed line is a header. */
export function isTraceHeader(l: TraceLine | TraceHeader): l is TraceHeader {
  return "kind" in l;
}
