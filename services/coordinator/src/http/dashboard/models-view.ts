/**
 * Pure view of the Models page: one row per configured model, loaded or not,
 * from a snapshot (configured models, their replicas, their instances).
 * `nowMs` is passed in, never read.
 */
import type { DashboardSnapshot } from "./dashboard-view.js";
import { ago, loadJobText } from "./view-model.js";

export type ModelStateWord = "ready" | "busy" | "loading" | "blocked" | "stopping" | "not loaded";

export interface ModelRow {
  readonly model: string;
  readonly backend: string;
  readonly state: ModelStateWord;
  /** "ready/desired", e.g. "1/2". */
  readonly replicas: string;
  /** "min..max". */
  readonly bounds: string;
  readonly min: number;
  readonly max: number;
  /** Node ids its instances are on, sorted, unique. */
  readonly nodes: readonly string[];
  readonly lastUsed: string;
  readonly sizeBytes: number;
  readonly pinned: boolean;
  readonly loaded: boolean;
  /** The scale-up breaker's last error, in words ("" when not blocked). */
  readonly blockedBy: string;
  /** Its load job in words, without the model's name ("loading (pulling 1.2 / 4.2 GiB …) on gpu-3 (12s)"); "" when it has none. */
  readonly job: string;
  readonly jobState: "waiting" | "loading" | "failed" | "";
}

export function modelRows(s: DashboardSnapshot, nowMs: number): ModelRow[] {
  const replicas = new Map((s.replicas ?? []).map((r) => [r.model, r]));
  const byModel = new Map<string, DashboardSnapshot["instances"][number][]>();
  for (const i of s.instances) {
    const list = byModel.get(i.model);
    if (list === undefined) byModel.set(i.model, [i]);
    else list.push(i);
  }
  return [...s.models]
    .sort((a, b) => a.model.localeCompare(b.model))
    .map((m) => {
      const r = replicas.get(m.model);
      const inst = byModel.get(m.model) ?? [];
      const ready = inst.filter((i) => i.state === "ready");
      const loading = inst.some((i) => i.state === "loading") || (r?.loading ?? 0) > 0;
      const stopping = inst.some((i) => i.state === "pending-eviction") || (r?.stopping ?? 0) > 0;
      const state: ModelStateWord = ready.some((i) => i.inFlight > 0) ? "busy" : ready.length > 0 ? "ready" : loading ? "loading" : r?.blocked !== undefined ? "blocked" : stopping ? "stopping" : "not loaded";
      const last = inst.map((i) => i.lastUsedAt).filter((t) => t !== "").sort().at(-1) ?? "";
      const readyCount = r?.ready ?? ready.length;
      return {
        model: m.model,
        backend: m.backend,
        state,
        replicas: `${String(readyCount)}/${String(r?.desired ?? 0)}`,
        bounds: r === undefined ? "" : `${String(r.min)}..${String(r.max)}`,
        min: r?.min ?? 0,
        max: r?.max ?? 0,
        nodes: [...new Set(inst.filter((i) => i.state === "ready" || i.state === "loading").map((i) => i.nodeId))].sort(),
        lastUsed: ago(last, nowMs),
        sizeBytes: m.sizeBytes,
        pinned: m.pinned,
        loaded: ready.length > 0 || loading,
        blockedBy: r?.blocked === undefined ? "" : `${r.blocked.error} (${String(r.blocked.failures)} failures; next try in ${String(Math.ceil(r.blocked.retryAfterMs / 1000))} s)`,
        job: m.loadJob === undefined ? "" : loadJobText(m.model, m.loadJob).slice(m.model.length + 2),
        jobState: m.loadJob?.state ?? "",
      };
    });
}
