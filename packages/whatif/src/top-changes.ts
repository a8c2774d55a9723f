import type { NodeMemoryReport, ReplayReport } from "./replay-meter.js";

const gib = 1024 ** 3;

/**
 * A node's peak memory change counts when it is at least 10 % of the larger
 * of the two peaks, clamped to 0.1–0.5 GiB: 0.5 GiB on any node of 5 GiB
 * peak or more, less on a small one, and never under 0.1 GiB (the lines print
 * GiB to one decimal, so a smaller change would read "+0.0 GiB").
 */
export function memoryChangeThreshold(largerPeakBytes: number): number {
  return Math.min(0.5 * gib, Math.max(0.1 * gib, 0.1 * largerPeakBytes));
}

/** A node whose peak differs between the two sides by at least the threshold; `model` when the replay can say whose loads made the difference. */
export interface MemoryChange {
  readonly nodeId: string;
  readonly fromBytes: number;
  readonly toBytes: number;
  /**
   * The one model whose memory at the node's peak differs between the two
   * sides (what every other model held there at the peak is the same): its
   * loads made the difference. Undefined when several models differ or a
   * side keeps no per-model figures.
   */
  readonly model: string | undefined;
}

function attribute(a: NodeMemoryReport, b: NodeMemoryReport): string | undefined {
  const differing = [...new Set([...Object.keys(a.peakByModel), ...Object.keys(b.peakByModel)])].filter((m) => (a.peakByModel[m] ?? 0) !== (b.peakByModel[m] ?? 0));
  return differing.length === 1 ? differing[0] : undefined;
}

/** Nodes whose peak memory changed by at least memoryChangeThreshold, in the candidate's node order. Needs both sides replayed: none when `cur` has no nodes (a recorded side). */
export function memoryChanges(cur: Partial<Pick<ReplayReport, "nodes">>, cand: Pick<ReplayReport, "nodes">): MemoryChange[] {
  const out: MemoryChange[] = [];
  for (const b of cand.nodes) {
    const a = cur.nodes?.find((n) => n.nodeId === b.nodeId);
    if (a === undefined) continue;
    if (Math.abs(b.peakBytes - a.peakBytes) < memoryChangeThreshold(Math.max(a.peakBytes, b.peakBytes))) continue;
    out.push({ nodeId: b.nodeId, fromBytes: a.peakBytes, toBytes: b.peakBytes, model: attribute(a, b) });
  }
  return out;
}

const signedGib = (bytes: number): string => `${bytes >= 0 ? "+" : "−"}${(Math.abs(bytes) / gib).toFixed(1)} GiB`;
const hours = (h: number): string => h.toFixed(2);

/**
 * The largest differences in words, biggest relative change first ("chat:
 * 41 cold starts → 6, +2.1 GiB peak on gpu-2"). A memory change attributed
 * to a model joins that model's cold-start line (or gets its own line for
 * the model); one that is not gets a line for the node. A memory change
 * weighs its GiB over the smaller peak's (at least 1 GiB), as a count's
 * change weighs over the smaller count (at least 1).
 */
export function topChanges(cur: Partial<ReplayReport>, cand: ReplayReport, max = 5): string[] {
  const out = new Map<string, { text: string; weight: number }>();
  const weigh = (a: number, b: number, unit: number): number => Math.abs(b - a) / Math.max(unit, Math.min(a, b));
  const add = (key: string, text: string, a: number, b: number): void => {
    if (a !== b) out.set(key, { text, weight: weigh(a, b, 1) });
  };
  const models = new Set([...Object.keys(cur.coldStartsByModel ?? {}), ...Object.keys(cand.coldStartsByModel)]);
  for (const m of models) {
    const a = cur.coldStartsByModel?.[m] ?? 0;
    const b = cand.coldStartsByModel[m] ?? 0;
    add(`model:${m}`, `${m}: ${String(a)} cold starts → ${String(b)}`, a, b);
  }
  const reasons = new Set([...Object.keys(cur.evictionsByReason ?? {}), ...Object.keys(cand.evictionsByReason)]);
  for (const r of reasons) {
    const a = cur.evictionsByReason?.[r] ?? 0;
    const b = cand.evictionsByReason[r] ?? 0;
    add(`evictions:${r}`, `${r} evictions: ${String(a)} → ${String(b)}`, a, b);
  }
  if (cur.failedCalls !== undefined) add("failed", `failed or refused calls: ${String(cur.failedCalls)} → ${String(cand.failedCalls)}`, cur.failedCalls, cand.failedCalls);
  if (cur.idleInstanceHours !== undefined && Math.abs(cur.idleInstanceHours - cand.idleInstanceHours) >= 0.01) add("idle", `GPU-hours held idle: ${hours(cur.idleInstanceHours)} → ${hours(cand.idleInstanceHours)}`, cur.idleInstanceHours, cand.idleInstanceHours);
  for (const c of memoryChanges(cur, cand)) {
    const delta = signedGib(c.toBytes - c.fromBytes);
    const weight = weigh(c.fromBytes / gib, c.toBytes / gib, 1);
    if (c.model === undefined) {
      out.set(`node:${c.nodeId}`, { text: `${c.nodeId}: ${delta} peak (${(c.fromBytes / gib).toFixed(1)} → ${(c.toBytes / gib).toFixed(1)} GiB)`, weight });
      continue;
    }
    const part = `${delta} peak on ${c.nodeId}`;
    const line = out.get(`model:${c.model}`);
    out.set(`model:${c.model}`, line === undefined ? { text: `${c.model}: ${part}`, weight } : { text: `${line.text}, ${part}`, weight: Math.max(line.weight, weight) });
  }
  return [...out.values()]
    .sort((a, b) => b.weight - a.weight || a.text.localeCompare(b.text))
    .slice(0, max)
    .map((c) => c.text);
}
