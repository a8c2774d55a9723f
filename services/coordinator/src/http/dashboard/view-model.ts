/**
 * Pure view model of the dashboard: snapshot → node cards and instance rows
 * (with the colour of each state), events → log lines. No DOM and no I/O, so
 * the browser client renders what these return and unit tests check them
 * without a browser. `nowMs` is passed in (the client's clock), never read.
 */
import type { DashboardEvent, DashboardInstance, DashboardLoadJob, DashboardNode, DashboardSnapshot } from "./dashboard-view.js";

/** What a row is coloured by: an instance's state, with `busy` (ready and serving) and `foreign` (a process Warden did not start) added. */
export type InstanceKind = "loading" | "ready" | "busy" | "pending-eviction" | "leftover" | "orphan" | "foreign" | "freed" | "unknown";

export interface KindStyle {
  readonly label: string;
  /** CSS colour of the row's badge (also the legend). */
  readonly colour: string;
}

/** One colour per kind; the legend lists them in this order. */
export const kindStyles: Readonly<Record<InstanceKind, KindStyle>> = Object.freeze({
  loading: { label: "loading", colour: "#8a6500" },
  ready: { label: "ready", colour: "#1b7a31" },
  busy: { label: "busy", colour: "#1f6fd1" },
  "pending-eviction": { label: "pending eviction", colour: "#b0500c" },
  leftover: { label: "leftover", colour: "#c62828" },
  orphan: { label: "orphan", colour: "#8e24aa" },
  foreign: { label: "foreign", colour: "#616161" },
  freed: { label: "freed", colour: "#795548" },
  unknown: { label: "unknown", colour: "#666666" },
});

export function instanceKind(i: Pick<DashboardInstance, "state" | "inFlight">): InstanceKind {
  if (i.state === "ready") return i.inFlight > 0 ? "busy" : "ready";
  return i.state;
}

export interface InstanceRow {
  /** Stable DOM key: the incarnation (`pid:<n>` for orphans and foreign processes). */
  readonly key: string;
  readonly kind: InstanceKind;
  readonly model: string;
  readonly detail: string;
  readonly inFlight: number;
  readonly lastUsed: string;
  readonly sizeBytes: number;
}

export interface MemoryBar {
  /** GPU memory summed over the node's GPUs, or RAM on a node without GPUs (as placement counts it). */
  readonly source: "gpu" | "ram" | "none";
  readonly totalBytes: number;
  /** What the agent measured at its last heartbeat. */
  readonly measuredBytes: number;
  /** What Warden accounts for the node. */
  readonly accountedBytes: number;
  /** measured − accounted: memory Warden does not know about (positive) or estimates it holds that the agent does not see (negative). */
  readonly driftBytes: number;
  /** Widths in percent of total, clamped to 0..100 (0 when total is unknown). */
  readonly measuredPct: number;
  readonly accountedPct: number;
}

export interface NodeCard {
  readonly nodeId: string;
  readonly title: string;
  readonly status: string;
  readonly draining: boolean;
  readonly memory: MemoryBar;
  readonly gpus: readonly { readonly label: string; readonly totalBytes: number; readonly usedBytes: number; readonly usedPct: number }[];
  readonly rows: readonly InstanceRow[];
}

function pct(part: number, total: number): number {
  if (total <= 0) return 0;
  return Math.min(100, Math.max(0, Math.round((part / total) * 1000) / 10));
}

export function memoryBar(n: DashboardNode): MemoryBar {
  let totalBytes = 0;
  let measuredBytes = 0;
  let source: MemoryBar["source"] = "none";
  if (n.gpus.length > 0) {
    source = "gpu";
    for (const g of n.gpus) {
      totalBytes += g.totalBytes;
      measuredBytes += g.usedBytes;
    }
  } else if (n.ramTotalBytes > 0) {
    source = "ram";
    totalBytes = n.ramTotalBytes;
    measuredBytes = n.ramUsedBytes;
  }
  return { source, totalBytes, measuredBytes, accountedBytes: n.accountedBytes, driftBytes: measuredBytes - n.accountedBytes, measuredPct: pct(measuredBytes, totalBytes), accountedPct: pct(n.accountedBytes, totalBytes) };
}

const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/** 1536 → "1.5 KiB"; negative values keep their sign. */
export function formatBytes(bytes: number): string {
  const sign = bytes < 0 ? "-" : "";
  let v = Math.abs(bytes);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  const digits = u === 0 || v >= 100 ? 0 : 1;
  return `${sign}${v.toFixed(digits)} ${units[u] ?? "B"}`;
}

/** "" → "never"; otherwise how long before `nowMs`, coarsely ("4 s ago", "3 min ago"). */
export function ago(iso: string, nowMs: number): string {
  if (iso === "") return "never";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "?";
  const s = Math.max(0, Math.round((nowMs - t) / 1000));
  if (s < 60) return `${String(s)} s ago`;
  if (s < 3600) return `${String(Math.floor(s / 60))} min ago`;
  if (s < 86_400) return `${String(Math.floor(s / 3600))} h ago`;
  return `${String(Math.floor(s / 86_400))} d ago`;
}

function instanceDetail(i: DashboardInstance): string {
  const parts: string[] = [];
  if (i.address !== "") parts.push(i.address);
  if (i.pinned) parts.push("pinned");
  if (i.groups.length > 0) parts.push(`groups ${i.groups.join(",")}`);
  if (i.leftover !== undefined) parts.push(`stop attempts ${String(i.leftover.attempts)}${i.leftover.stuck ? " (stuck)" : ""}${i.leftover.lastError === "" ? "" : `: ${i.leftover.lastError}`}`);
  if (i.outage === "serving") parts.push("serving, agent unreachable");
  else if (i.outage === "probe failed") parts.push("agent unreachable, health probe failed");
  else if (i.nodeState !== "ready" && i.nodeState !== "unknown") parts.push(`node ${i.nodeState}`);
  return parts.join(" · ");
}

function byModelThenKey(a: InstanceRow, b: InstanceRow): number {
  return a.model < b.model ? -1 : a.model > b.model ? 1 : a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** One card per node (in node id order), each with its instances and foreign processes as rows. */
export function nodeCards(s: DashboardSnapshot, nowMs: number): NodeCard[] {
  const rowsByNode = new Map<string, InstanceRow[]>();
  for (const i of s.instances) {
    const rows = rowsByNode.get(i.nodeId) ?? [];
    rows.push({ key: i.incarnation, kind: instanceKind(i), model: i.model, detail: instanceDetail(i), inFlight: i.inFlight, lastUsed: ago(i.lastUsedAt, nowMs), sizeBytes: i.sizeBytes });
    rowsByNode.set(i.nodeId, rows);
  }
  const cards: NodeCard[] = [];
  for (const n of [...s.nodes].sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0))) {
    const rows = [...(rowsByNode.get(n.nodeId) ?? [])].sort(byModelThenKey);
    for (const f of n.foreign) rows.push({ key: `pid:${String(f.pid)}`, kind: "foreign", model: "(foreign process)", detail: [f.address, f.detail].filter((x) => x !== "").join(" · "), inFlight: 0, lastUsed: "", sizeBytes: 0 });
    const status = [n.state, ...(n.draining ? [`draining (${String(n.drainRemaining)} left)`] : []), ...(n.embedded ? ["embedded"] : [])].join(" · ");
    cards.push({
      nodeId: n.nodeId,
      title: n.nodeId,
      status,
      draining: n.draining,
      memory: memoryBar(n),
      gpus: n.gpus.map((g) => ({ label: `GPU ${String(g.index)}${g.name === "" ? "" : ` ${g.name}`}`, totalBytes: g.totalBytes, usedBytes: g.usedBytes, usedPct: pct(g.usedBytes, g.totalBytes) })),
      rows,
    });
  }
  return cards;
}

export type EventTone = "info" | "ok" | "warn" | "error";

export interface EventLine {
  readonly id: string;
  readonly time: string;
  readonly type: string;
  readonly tone: EventTone;
  readonly text: string;
}

/** EVICTION_REASON_GROUP → "group"; the proto JSON enum names carry a long prefix. */
function enumWord(v: unknown, prefix: string): string {
  if (typeof v !== "string") return "";
  return (v.startsWith(prefix) ? v.slice(prefix.length) : v).toLowerCase().replace(/_/g, "-");
}

function payload(e: DashboardEvent, key: string): Record<string, unknown> {
  const p = e[key];
  return typeof p === "object" && p !== null ? (p as Record<string, unknown>) : {};
}

function str(v: unknown): string {
  return typeof v === "string" ? v : typeof v === "number" || typeof v === "boolean" ? String(v) : "";
}

/** One log line per event; the eviction lifecycle (started → stopped / failed with its outcome) is spelled out, other types summarised. */
export function eventLine(e: DashboardEvent): EventLine {
  const where = `${e.model ?? ""}${e.model !== undefined && e.model !== "" && e.nodeId !== undefined && e.nodeId !== "" ? " on " : ""}${e.nodeId ?? ""}`;
  const at = where === "" ? "" : ` ${where}`;
  const base = { id: e.id ?? "", time: e.time ?? "", type: e.type };
  switch (e.type) {
    case "eviction.started": {
      const p = payload(e, "evictionStarted");
      const trigger = str(p.trigger);
      return { ...base, tone: "warn", text: `eviction started${at}: reason ${enumWord(p.reason, "EVICTION_REASON_")}${trigger === "" ? "" : ` (${trigger})`}${p.wasBusy === true ? ", was busy" : ""}${p.force === true ? ", forced" : ""}` };
    }
    case "eviction.stopped": {
      const p = payload(e, "evictionStopped");
      return { ...base, tone: "ok", text: `eviction stopped${at}: reason ${enumWord(p.reason, "EVICTION_REASON_")}${p.alreadyGone === true ? ", already gone" : ""}` };
    }
    case "eviction.failed": {
      const p = payload(e, "evictionFailed");
      const error = str(p.error);
      return { ...base, tone: "error", text: `eviction failed${at}: reason ${enumWord(p.reason, "EVICTION_REASON_")}, outcome ${enumWord(p.outcome, "EVICTION_FAILED_OUTCOME_")}${error === "" ? "" : ` — ${error}`}` };
    }
    case "backend.loaded": {
      const p = payload(e, "backendLoaded");
      const ms = str(p.loadDurationMs);
      return { ...base, tone: "ok", text: `loaded${at}${ms === "" ? "" : ` in ${ms} ms`}` };
    }
    case "backend.load-failed": {
      const p = payload(e, "backendLoadFailed");
      return { ...base, tone: "error", text: `load failed${at}: ${str(p.message)}` };
    }
    case "load.waiting":
      // The reason says what it waits for (a node, or the recovery window after a start).
      return { ...base, tone: "warn", text: `load waiting${at}: ${str(payload(e, "loadWaiting").reason)}` };
    case "load.failed": {
      const p = payload(e, "loadFailed");
      return { ...base, tone: "error", text: `load failed${at} (${str(p.code)}): ${str(p.reason)}` };
    }
    case "leftover.stuck":
    case "node.lost":
    case "node.unreachable":
    case "foreign.detected":
    case "policy.limit-exceeded":
    case "journal.repaired":
      return { ...base, tone: "warn", text: `${e.type}${at}` };
    default:
      return { ...base, tone: "info", text: `${e.type}${at}` };
  }
}

/** Bytes per second: "85 MiB/s", "1.5 MiB/s" (whole units from 10 up, as a rate is read). */
export function formatRate(bytesPerSecond: number): string {
  let v = bytesPerSecond;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(u === 0 || v >= 10 ? 0 : 1)} ${units[u] ?? "B"}/s`;
}

/** " 1.2 / 4.2 GiB at 85 MiB/s": done and total in the total's unit, and the rate when known; "" when the job reports no bytes. */
function loadProgressText(j: DashboardLoadJob): string {
  const total = j.bytesTotal ?? 0;
  if (total <= 0) return "";
  let u = 0;
  while (total / 1024 ** u >= 1024 && u < units.length - 1) u++;
  const inUnit = (b: number): string => (b / 1024 ** u).toFixed(u === 0 ? 0 : 1);
  const rate = (j.bytesPerSecond ?? 0) > 0 ? ` at ${formatRate(j.bytesPerSecond ?? 0)}` : "";
  return ` ${inUnit(Math.min(j.bytesDone ?? 0, total))} / ${inUnit(total)} ${units[u] ?? "B"}${rate}`;
}

/** A model's load job in one line, as `warden models ls` says it but with a pull's bytes: "m: loading (pulling 1.2 / 4.2 GiB at 85 MiB/s) on gpu-3 (12s)". */
export function loadJobText(model: string, j: DashboardLoadJob): string {
  const age = `${String(Math.round(j.forMs / 1000))}s`;
  switch (j.state) {
    case "waiting":
      return `${model}: ${j.phase === "waiting_for_recovery" ? "waiting for the recovery window" : j.phase === "waiting_for_instance" ? "waiting for its instance" : "waiting for a node"}: ${j.reason} (${age})`;
    case "loading": {
      // The backend loading the model is what "loading" already says: no "(loading)" after it.
      const phase = j.phase === "loading" ? "" : ` (${j.phase.replace(/_/g, " ")}${loadProgressText(j)})`;
      return `${model}: loading${phase}${j.nodeId === "" ? "" : ` on ${j.nodeId}`} (${age})`;
    }
    case "failed":
      return `${model}: failed: ${j.reason} (${j.code}, ${age} ago)`;
  }
}

/** Appends `line` and keeps only the newest `max` (the page's log is bounded like everything else). */
export function appendBounded<T>(list: readonly T[], line: T, max: number): T[] {
  const out = list.length >= max ? list.slice(list.length - max + 1) : [...list];
  out.push(line);
  return out;
}

/**
 * "100 of 250 nodes listed · 84 fit now, 83 after eviction": Explain's
 * decision weighed every node, its list shows the first page of them.
 * Empty when no node was weighed (none registered, or the model already at
 * its max replicas).
 */
export function explainCounts(r: { readonly nodes: readonly unknown[]; readonly nodesTotal: number; readonly nodesFit: number; readonly nodesFitAfterEviction: number }): string {
  const total = r.nodesTotal;
  if (total === 0) return "";
  const listed = r.nodes.length < total ? `${String(r.nodes.length)} of ${String(total)} nodes listed` : `${String(total)} node${total === 1 ? "" : "s"}`;
  return `${listed} · ${String(r.nodesFit)} fit now, ${String(r.nodesFitAfterEviction)} after eviction`;
}
