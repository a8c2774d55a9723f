import { Code, WardenError, invalidArgument } from "@warden/common";
import { applyPolicyPatch, type PolicyPatch, type WatchdogCaps, type WatchdogPolicy } from "@warden/watchdog";
import { isTraceHeader, pareto, parseTraceLine, replayInput, replayTrace, type ReplayConfig, type ReplayReport, type TraceLine } from "@warden/whatif";
import type { CoordinatorConfig } from "../../config/coordinator-config.js";
import { AdmissionGate } from "../../routing/admission-gate.js";
import type { SweepField, SweepPoint, SweepResult, SweepRow } from "./sweep-view.js";

/**
 * The Policy page's what-if sweep: the coordinator's own trace replayed
 * (packages/whatif, the production decision code on virtual time) under the
 * live policy and under each point of a grid over the page's policy fields.
 * Bounds: at most 2 axes of at most 8 values and 16 points; a window of
 * 1 minute to 7 days (default 24 h); at most 200 000 trace lines; one sweep
 * at a time per coordinator (the replays share its CPU with serving).
 */
export const sweepBounds = Object.freeze({ maxAxes: 2, maxValues: 8, maxPoints: 16, minWindowMs: 60_000, maxWindowMs: 7 * 86_400_000, defaultWindowMs: 86_400_000, maxLines: 200_000 });

/** Largest sweep body read. */
export const maxSweepBodyBytes = 4096;

/** The fields a sweep may vary and their JSON types. */
const sweepable: Readonly<Record<SweepField, "count" | "flag" | "ms" | "fraction">> = { limitPerNode: "count", idleCheck: "flag", idleTimeoutMs: "ms", busyCheck: "flag", busyTimeoutMs: "ms", memoryReclaimer: "flag", memoryThreshold: "fraction", forceEvictionWhenBusy: "flag", sizeAware: "flag" };

export interface SweepRequest {
  readonly axes: readonly { readonly field: SweepField; readonly values: readonly (number | boolean)[] }[];
  readonly windowMs: number;
}

function value(field: SweepField, v: unknown, where: string): number | boolean {
  const kind = sweepable[field];
  if (kind === "flag") {
    if (typeof v !== "boolean") throw invalidArgument(where, "must be true or false");
    return v;
  }
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw invalidArgument(where, "must be a number >= 0");
  if (kind !== "fraction" && !Number.isSafeInteger(v)) throw invalidArgument(where, "must be a whole number");
  return v;
}

/** The page's sweep body `{ axes: [{ field, values }], windowMs? }`, validated whole (errors name the field). */
export function parseSweepRequest(body: unknown): SweepRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw invalidArgument("body", "must be a JSON object");
  const o = body as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== "axes" && k !== "windowMs") throw invalidArgument(k.slice(0, 64), "unknown field (expected axes, windowMs)");
  const raw = o["axes"];
  if (!Array.isArray(raw) || raw.length === 0 || raw.length > sweepBounds.maxAxes) throw invalidArgument("axes", `must be a list of 1 to ${String(sweepBounds.maxAxes)} axes`);
  const axes = raw.map((a: unknown, i) => {
    const where = `axes[${String(i)}]`;
    if (typeof a !== "object" || a === null) throw invalidArgument(where, "must be { field, values }");
    const { field, values } = a as { field?: unknown; values?: unknown };
    if (typeof field !== "string" || !(field in sweepable)) throw invalidArgument(`${where}.field`, `must be one of ${Object.keys(sweepable).join(", ")}`);
    const f = field as SweepField;
    if (!Array.isArray(values) || values.length === 0 || values.length > sweepBounds.maxValues) throw invalidArgument(`${where}.values`, `must be a list of 1 to ${String(sweepBounds.maxValues)} values`);
    return { field: f, values: values.map((v: unknown, j) => value(f, v, `${where}.values[${String(j)}]`)) };
  });
  if (new Set(axes.map((a) => a.field)).size !== axes.length) throw invalidArgument("axes", "names a field twice");
  const points = axes.reduce((n, a) => n * a.values.length, 1);
  if (points > sweepBounds.maxPoints) throw invalidArgument("axes", `${String(points)} points: at most ${String(sweepBounds.maxPoints)}`);
  const w = o["windowMs"];
  if (w !== undefined && (typeof w !== "number" || !Number.isSafeInteger(w) || w < sweepBounds.minWindowMs || w > sweepBounds.maxWindowMs)) throw invalidArgument("windowMs", `must be a whole number of milliseconds from ${String(sweepBounds.minWindowMs)} to ${String(sweepBounds.maxWindowMs)}`);
  return { axes, windowMs: w ?? sweepBounds.defaultWindowMs };
}

function grid(axes: SweepRequest["axes"]): SweepPoint[] {
  let out: Record<string, number | boolean>[] = [{}];
  for (const a of axes) out = out.flatMap((p) => a.values.map((v) => ({ ...p, [a.field]: v })));
  return out;
}

/** Trace lines from ExportTrace's chunks (whole lines each); more than the bound is refused. */
export async function readTraceChunks(chunks: AsyncIterable<{ readonly data: Uint8Array }>): Promise<TraceLine[]> {
  const lines: TraceLine[] = [];
  const dec = new TextDecoder();
  let n = 0;
  for await (const c of chunks) {
    for (const text of dec.decode(c.data).split("\n")) {
      n++;
      if (text === "") continue;
      const l = parseTraceLine(text, n);
      if (l === undefined || isTraceHeader(l)) continue;
      lines.push(l);
      if (lines.length > sweepBounds.maxLines) throw new WardenError(Code.ResourceExhausted, `windowMs: the window holds more than ${String(sweepBounds.maxLines)} trace lines; sweep a shorter one (or use warden policy simulate)`, { details: { field: "windowMs" } });
    }
  }
  return lines;
}

function row(point: SweepPoint, r: ReplayReport): Omit<SweepRow, "pareto"> {
  return {
    point,
    coldStarts: r.coldStarts,
    evictions: Object.values(r.evictionsByReason).reduce((a, b) => a + b, 0),
    evictionsByReason: r.evictionsByReason,
    callsWaited: r.callsWaited,
    waitP50Ms: r.waitP50Ms,
    waitP99Ms: r.waitP99Ms,
    failedCalls: r.failedCalls,
    peakBytes: r.nodes.reduce((m, n) => Math.max(m, n.peakBytes), 0),
    idleInstanceHours: r.idleInstanceHours,
  };
}

/**
 * Replays `lines` under the live policy and each grid point over it. A point
 * the watchdog would refuse (out of its bounds) is refused before any replay,
 * naming the field, as UpdatePolicy would refuse it.
 */
export async function runSweep(o: { readonly lines: readonly TraceLine[]; readonly config: CoordinatorConfig; readonly live: WatchdogPolicy; readonly caps: WatchdogCaps; readonly request: SweepRequest; readonly signal: AbortSignal; readonly now: () => number }): Promise<SweepResult> {
  const points = grid(o.request.axes);
  const base: ReplayConfig = { models: o.config.models, policy: o.live, placement: o.config.placement, enforcement: o.config.enforcement, cooldown: o.config.cooldown, stop: o.config.stop, loadWaitMs: o.config.loadWaitMs, admission: o.config.admission };
  const configs = points.map((p) => ({ point: p, config: { ...base, policy: applyPolicyPatch(o.live, p as PolicyPatch, o.caps) } }));
  const input = replayInput(o.lines);
  if (input.nodes.size === 0 || input.calls.length === 0) throw new WardenError(Code.FailedPrecondition, "the trace holds no calls or no node in this window: nothing to replay yet", { details: { field: "windowMs" } });
  const started = o.now();
  const opts = { signal: o.signal, admissionGate: (ports: ConstructorParameters<typeof AdmissionGate>[0]) => new AdmissionGate(ports) };
  const results: { point: SweepPoint; report: ReplayReport }[] = [{ point: {}, report: await replayTrace(input, base, opts) }];
  // A swept field holds its point's value over the trace's recorded operator changes to it.
  for (const c of configs) results.push({ point: c.point, report: await replayTrace(input, c.config, { ...opts, keepPolicyFields: new Set(Object.keys(c.point)) }) });
  const front = new Set(pareto(results));
  const last = input.calls[input.calls.length - 1];
  return { calls: input.calls.length, spanMs: last === undefined ? 0 : last.at - input.startAt, nodes: input.nodes.size, rows: results.map((r) => ({ ...row(r.point, r.report), pareto: front.has(r) })), elapsedMs: o.now() - started };
}
