import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { createInterface } from "node:readline";
import { parse as parseYaml } from "yaml";
import { Code, WardenError, formatDurationMs, invalidArgument } from "@warden/common";
import { AdmissionGate, resolveCoordinatorConfig } from "@warden/coordinator";
import { isTraceHeader, maxReplayLines, pareto, parseTraceLine, replayInput, replayTrace, topChanges, type ReplayConfig, type ReplayInput, type ReplayReport, type TraceLine } from "@warden/whatif";

/** At most this many sweep points (each one a replay). */
export const maxSweepPoints = 64;

/** Reads a trace file (JSON lines, headers anywhere: segments may be concatenated); errors name the line. */
export async function readTrace(path: string): Promise<TraceLine[]> {
  const lines: TraceLine[] = [];
  const rl = createInterface({ input: createReadStream(path, { encoding: "utf8" }), crlfDelay: Infinity });
  let n = 0;
  let headers = 0;
  try {
    for await (const text of rl) {
      n++;
      if (text.trim() === "") continue;
      const l = parseTraceLine(text, n);
      if (l === undefined) continue;
      if (isTraceHeader(l)) headers++;
      else lines.push(l);
      if (lines.length > maxReplayLines) throw invalidArgument("--trace", `more than ${String(maxReplayLines)} lines: export a shorter window (--since)`);
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") throw new WardenError(Code.NotFound, `--trace: no such file ${path}`);
    throw err;
  }
  if (headers === 0) throw invalidArgument("--trace", `${path} has no trace header line: not a Warden trace`);
  return lines;
}

/** Reads a coordinator config YAML as a raw document (sweeps change it before validation). */
async function readConfigDoc(path: string, flag: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    throw new WardenError(Code.NotFound, `${flag}: cannot read ${path}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw invalidArgument(flag, `${path}: YAML syntax error: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc)) throw invalidArgument(flag, `${path}: config must be a map`);
  return doc as Record<string, unknown>;
}

/** Validates as the coordinator does at start: the same parser, the error naming the file and field. */
function validated(doc: Record<string, unknown>, path: string): ReplayConfig {
  try {
    const c = resolveCoordinatorConfig(doc);
    return { models: c.models, policy: c.policy, placement: c.placement, enforcement: c.enforcement, cooldown: c.cooldown, stop: c.stop, loadWaitMs: c.loadWaitMs, admission: c.admission };
  } catch (err) {
    const e = WardenError.from(err);
    throw new WardenError(e.code, `${path} would not load: ${e.rawMessage}`);
  }
}

/** `--sweep idleTimeout=1m,5m,15m`: a policy field and its values. */
export function parseSweep(specs: readonly string[]): { readonly key: string; readonly values: readonly string[] }[] {
  const axes = specs.map((s) => {
    const m = /^([A-Za-z]+)=(.+)$/.exec(s);
    if (m === null) throw invalidArgument("--sweep", `expected field=v1,v2,... (e.g. idleTimeout=1m,5m), got ${JSON.stringify(s)}`);
    const values = (m[2] ?? "").split(",").map((v) => v.trim()).filter((v) => v !== "");
    return { key: m[1] ?? "", values };
  });
  const points = axes.reduce((n, a) => n * a.values.length, 1);
  if (points > maxSweepPoints) throw invalidArgument("--sweep", `${String(points)} points: at most ${String(maxSweepPoints)}`);
  return axes;
}

/** A YAML scalar as the config file would hold it: true/false and numbers typed, the rest a string ("5m"). */
function scalar(v: string): unknown {
  if (v === "true" || v === "false") return v === "true";
  return /^-?[0-9]+(\.[0-9]+)?$/.test(v) ? Number(v) : v;
}

function grid(axes: readonly { readonly key: string; readonly values: readonly string[] }[]): Record<string, string>[] {
  let out: Record<string, string>[] = [{}];
  for (const a of axes) out = out.flatMap((p) => a.values.map((v) => ({ ...p, [a.key]: v })));
  return out;
}

function withPolicy(doc: Record<string, unknown>, point: Record<string, string>): Record<string, unknown> {
  const policy = { ...((doc["policy"] ?? {}) as Record<string, unknown>) };
  for (const [k, v] of Object.entries(point)) policy[k] = scalar(v);
  // A swept idleTimeout means nothing with the idle check off.
  if ("idleTimeout" in point && policy["idleCheck"] === undefined) policy["idleCheck"] = true;
  return { ...doc, policy };
}

export interface SimulateOptions {
  readonly trace: string;
  readonly policy: string;
  readonly against?: string;
  readonly sweep: readonly string[];
  readonly loadTimeMs: number;
  readonly seed: number;
  readonly json: boolean;
}

/** `warden policy simulate`: replays, compares, prints. */
export async function simulate(o: SimulateOptions, now: () => number): Promise<string> {
  const axes = parseSweep(o.sweep);
  const candidateDoc = await readConfigDoc(o.policy, "--policy");
  const candidate = validated(candidateDoc, o.policy);
  const current = o.against === undefined ? undefined : validated(await readConfigDoc(o.against, "--against"), o.against);
  const points = axes.length === 0 ? [] : grid(axes).map((p) => ({ point: p, config: validated(withPolicy(candidateDoc, p), `${o.policy} with ${describePoint(p)}`) }));
  const lines = await readTrace(o.trace);
  const input = replayInput(lines);
  if (input.nodes.size === 0) throw invalidArgument("--trace", "names no node (no node or mem line): nothing to place on");
  // Calls of models with `admission:` go through the coordinator's own gate, each at its recorded class.
  const opts = { defaultLoadMs: o.loadTimeMs, seed: o.seed, admissionGate: (ports: ConstructorParameters<typeof AdmissionGate>[0]) => new AdmissionGate(ports) };
  const started = now();
  if (points.length > 0) {
    const results: { point: Record<string, string>; report: ReplayReport }[] = [];
    // A swept field holds its point's value over the trace's recorded changes to it.
    for (const p of points) results.push({ point: p.point, report: await replayTrace(input, p.config, { ...opts, keepPolicyFields: new Set(Object.keys(p.point)) }) });
    const elapsedMs = now() - started;
    if (o.json) return JSON.stringify({ sweep: results, pareto: pareto(results).map((r) => r.point), traceGaps: traceGaps(input), elapsedMs }) + "\n";
    return gapWarning(input) + renderSweep(results, input, elapsedMs);
  }
  const cand = await replayTrace(input, candidate, opts);
  const cur = current === undefined ? undefined : await replayTrace(input, current, opts);
  const elapsedMs = now() - started;
  if (o.json) return JSON.stringify({ current: cur ?? null, recorded: cur === undefined ? recorded(lines, input) : null, candidate: cand, traceGaps: traceGaps(input), elapsedMs }) + "\n";
  return gapWarning(input) + renderCompare(cur ?? recorded(lines, input), cur === undefined ? "recorded" : "current", cand, input, elapsedMs);
}

/** Gaps in the trace (lines its recorder dropped): how many, and the lines dropped in all. */
function traceGaps(input: ReplayInput): { readonly gaps: number; readonly droppedLines: number } {
  return { gaps: input.gaps.length, droppedLines: input.gaps.reduce((n, g) => n + g.dropped, 0) };
}

/** A warning line when the trace has gaps (empty when it has none): what the dropped lines held is missing from both columns. */
export function gapWarning(input: ReplayInput): string {
  const first = input.gaps[0];
  const last = input.gaps[input.gaps.length - 1];
  if (first === undefined || last === undefined) return "";
  const g = traceGaps(input);
  const when = (ms: number): string => new Date(ms).toISOString();
  return `warning: the trace has ${String(g.gaps)} gap${g.gaps === 1 ? "" : "s"}: its recorder dropped ${String(g.droppedLines)} lines (buffer full or a failed write) between ${when(first.at)} and ${when(last.lastAt)}; the calls, loads and stops they held are missing, so counts there are low\n\n`;
}

function describePoint(p: Record<string, string>): string {
  return Object.entries(p)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
}

/** What the trace itself recorded (no `--against`): the live cluster's own counts, where the trace holds them. */
export function recorded(lines: readonly TraceLine[], input: ReplayInput): Partial<ReplayReport> {
  const waits = input.calls.filter((c) => c.ok && c.waitMs > 0).map((c) => c.waitMs).sort((a, b) => a - b);
  const pick = (p: number): number => waits[Math.min(waits.length - 1, Math.max(0, Math.ceil((p / 100) * waits.length) - 1))] ?? 0;
  const evictions: Record<string, number> = {};
  const cold: Record<string, number> = {};
  for (const l of lines) {
    if (l.t === "stop") evictions[l.reason] = (evictions[l.reason] ?? 0) + 1;
    if (l.t === "load") cold[l.m] = (cold[l.m] ?? 0) + 1;
  }
  return { calls: input.calls.length, coldStarts: Object.values(cold).reduce((a, b) => a + b, 0), coldStartsByModel: cold, callsWaited: waits.length, waitP50Ms: pick(50), waitP99Ms: pick(99), evictionsByReason: evictions, failedCalls: input.calls.filter((c) => !c.ok).length };
}

/** Sweep points no other point beats on both cold starts and idle GPU-hours (shared with the dashboard's sweep). */
export { pareto } from "@warden/whatif";

const gib = (b: number): string => `${(b / 1024 ** 3).toFixed(1)}GiB`;
const dur = (ms: number): string => (ms === 0 ? "0" : formatDurationMs(Math.round(ms)));
const hours = (h: number): string => h.toFixed(2);

function table(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ").trimEnd()).join("\n") + "\n";
}

/** "; 4 recorded node events and operator changes replayed (1 refused)" — empty when the trace has none. */
function timelineNote(r: ReplayReport): string {
  const c = r.operatorChanges;
  if (c === undefined || c.applied + c.refused + c.kept === 0) return "";
  const extra = [c.refused > 0 ? `${String(c.refused)} refused by the candidate` : "", c.kept > 0 ? `${String(c.kept)} kept the swept value` : ""].filter((s) => s !== "");
  return `; ${String(c.applied)} recorded node events and operator changes replayed${extra.length === 0 ? "" : ` (${extra.join(", ")})`}`;
}

function span(input: ReplayInput): string {
  const last = input.calls[input.calls.length - 1];
  return last === undefined ? "an empty trace" : `${dur(last.at - input.startAt)} of trace (${String(input.calls.length)} calls, ${String(input.nodes.size)} nodes)`;
}

function renderCompare(cur: Partial<ReplayReport>, curName: string, cand: ReplayReport, input: ReplayInput, elapsedMs: number): string {
  const v = (x: number | undefined, f: (n: number) => string = String): string => (x === undefined ? "-" : f(x));
  const rows: string[][] = [["", curName, "candidate"]];
  rows.push(["calls", v(cur.calls), String(cand.calls)]);
  rows.push(["cold starts", v(cur.coldStarts), String(cand.coldStarts)]);
  rows.push(["calls that waited", v(cur.callsWaited), String(cand.callsWaited)]);
  rows.push(["wait p50 / p99", cur.waitP50Ms === undefined ? "-" : `${dur(cur.waitP50Ms)} / ${dur(cur.waitP99Ms ?? 0)}`, `${dur(cand.waitP50Ms)} / ${dur(cand.waitP99Ms)}`]);
  const reasons = new Set([...Object.keys(cur.evictionsByReason ?? {}), ...Object.keys(cand.evictionsByReason)]);
  for (const r of [...reasons].sort()) rows.push([`evictions: ${r}`, String(cur.evictionsByReason?.[r] ?? 0), String(cand.evictionsByReason[r] ?? 0)]);
  rows.push(["failed or refused calls", v(cur.failedCalls), String(cand.failedCalls)]);
  rows.push(["GPU-hours held idle", v(cur.idleInstanceHours, hours), hours(cand.idleInstanceHours)]);
  rows.push(["replica-seconds", v(cur.replicaSeconds, (n) => n.toFixed(0)), cand.replicaSeconds.toFixed(0)]);
  for (const n of cand.nodes) {
    const c = cur.nodes?.find((x) => x.nodeId === n.nodeId);
    rows.push([`${n.nodeId} memory peak / mean`, c === undefined ? "-" : `${gib(c.peakBytes)} / ${gib(c.meanBytes)}`, `${gib(n.peakBytes)} / ${gib(n.meanBytes)}`]);
  }
  const changes = topChanges(cur, cand);
  return [table(rows), changes.length === 0 ? "no change\n" : `top changes:\n${changes.map((c) => `  ${c}\n`).join("")}`, `replayed ${span(input)} in ${(elapsedMs / 1000).toFixed(1)}s${timelineNote(cand)}\n`].join("\n");
}

function renderSweep(rs: readonly { point: Record<string, string>; report: ReplayReport }[], input: ReplayInput, elapsedMs: number): string {
  const front = new Set(pareto(rs));
  const rows: string[][] = [["point", "cold starts", "waited p99", "failed", "GPU-hours idle", "pareto"]];
  for (const r of rs) rows.push([describePoint(r.point), String(r.report.coldStarts), dur(r.report.waitP99Ms), String(r.report.failedCalls), hours(r.report.idleInstanceHours), front.has(r) ? "*" : ""]);
  const best = [...front].sort((a, b) => a.report.coldStarts - b.report.coldStarts).map((r) => `  ${describePoint(r.point)}: ${String(r.report.coldStarts)} cold starts, ${hours(r.report.idleInstanceHours)} GPU-hours idle\n`);
  return `${table(rows)}\nPareto front (cold starts vs GPU-hours held idle; no other point is better on both):\n${best.join("")}\nreplayed ${span(input)} ${String(rs.length)} times in ${(elapsedMs / 1000).toFixed(1)}s${rs[0] === undefined ? "" : timelineNote(rs[0].report)}\n`;
}
