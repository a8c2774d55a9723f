/**
 * The Plots page: the coordinator's metrics ring (GET /api/dashboard/metrics,
 * the last hour at one sample every few seconds) drawn as small SVG line
 * charts — memory measured against accounted per node and each GPU's used
 * memory, and per model calls per second, latency p50 and p99, calls in
 * flight, tokens per second and calls waiting in admission, with loads and
 * evictions (the event history) marked on the time axis. Re-read every sample
 * period while the page is shown. No charting library: a polyline per series.
 */
import type { MetricsJson } from "../metrics-ring.js";
import { formatBytes } from "../view-model.js";
import { responseError, type ConsoleContext, type ConsolePage } from "./console-context.js";
import { byId, el } from "./dom.js";

const svgNs = "http://www.w3.org/2000/svg";
/** The drawing's own units (the SVG scales to its box). */
const w = 400;
const h = 120;
const pad = { left: 4, right: 4, top: 6, bottom: 14 };
/** Node memory charts drawn (the first nodes of the ring; each is two lines). */
const maxNodeCharts = 8;
const palette = ["#1f6fd1", "#e0701b", "#2e9e44", "#8e44ad", "#c62828", "#00838f", "#6d4c41", "#546e7a"];

type Column = readonly (number | null)[];
interface Line {
  readonly name: string;
  readonly values: Column;
  readonly colour: string;
}

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Readonly<Record<string, string>>): SVGElementTagNameMap[K] {
  const e = document.createElementNS(svgNs, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

/** The path of one series: segments between missing samples are left out; `dots` gets each lone point (no segment to draw it). */
function pathOf(times: readonly number[], values: Column, t0: number, t1: number, max: number, dots: [number, number][] = []): string {
  const xOf = (t: number): number => pad.left + ((t - t0) / Math.max(1, t1 - t0)) * (w - pad.left - pad.right);
  const yOf = (v: number): number => h - pad.bottom - (v / max) * (h - pad.top - pad.bottom);
  let d = "";
  let pen = false;
  values.forEach((v, i) => {
    if (v === null) {
      pen = false;
      return;
    }
    const x = xOf(times[i] ?? t0);
    const y = yOf(v);
    d += `${pen ? "L" : "M"}${x.toFixed(1)} ${y.toFixed(1)}`;
    if (!pen && (values[i + 1] ?? null) === null) dots.push([x, y]);
    pen = true;
  });
  return d;
}

/** A load or an eviction, marked on the time axis of the model charts. */
interface Mark {
  readonly atMs: number;
  readonly kind: "load" | "eviction";
  readonly text: string;
}

/** Event types marked, and how many of the newest are read (the history's own bound is 500 a read). */
const markTypes = "backend.loaded,eviction.stopped";
const maxMarks = 200;

function chart(id: string, title: string, times: readonly number[], lines: readonly Line[], unit: (v: number) => string, marks: readonly Mark[] = []): HTMLElement {
  const t0 = times[0] ?? 0;
  const t1 = times[times.length - 1] ?? t0;
  let max = 0;
  for (const l of lines) for (const v of l.values) if (v !== null && v > max) max = v;
  const top = max === 0 ? 1 : max * 1.1;
  const last = (c: Column): number | undefined => [...c].reverse().find((v): v is number => v !== null);
  const s = svg("svg", { viewBox: `0 0 ${String(w)} ${String(h)}`, preserveAspectRatio: "none", role: "img", "aria-label": `${title}: ${lines.map((l) => `${l.name} ${unit(last(l.values) ?? 0)}`).join(", ")}` });
  s.append(svg("line", { class: "axis", x1: String(pad.left), x2: String(w - pad.right), y1: String(h - pad.bottom), y2: String(h - pad.bottom) }));
  const label = (x: number, anchor: string, text: string, y = h - 2): SVGTextElement => {
    const t = svg("text", { class: "tick", x: String(x), y: String(y), "text-anchor": anchor });
    t.textContent = text;
    return t;
  };
  // Loads (green) and evictions (orange) within the charted span, as thin vertical lines with their words as a tooltip.
  for (const mk of marks) {
    if (mk.atMs < t0 || mk.atMs > t1 || t1 === t0) continue;
    const x = (pad.left + ((mk.atMs - t0) / (t1 - t0)) * (w - pad.left - pad.right)).toFixed(1);
    const line = svg("line", { x1: x, x2: x, y1: String(pad.top), y2: String(h - pad.bottom), stroke: mk.kind === "load" ? "#2e9e44" : "#e0701b", "stroke-dasharray": "3 2", "vector-effect": "non-scaling-stroke", "data-mark": mk.kind });
    const tip = svg("title", {});
    tip.textContent = mk.text;
    line.append(tip);
    s.append(line);
  }
  s.append(label(pad.left, "start", times.length === 0 ? "" : new Date(t0).toLocaleTimeString()), label(w - pad.right, "end", times.length === 0 ? "" : new Date(t1).toLocaleTimeString()), label(pad.left, "start", `max ${unit(max)}`, 12));
  for (const l of lines) {
    const m = l.values.reduce<number>((a, v) => (v !== null && v > a ? v : a), 0);
    const dots: [number, number][] = [];
    s.append(svg("path", { d: pathOf(times, l.values, t0, t1, top, dots), fill: "none", stroke: l.colour, "stroke-width": "1.5", "vector-effect": "non-scaling-stroke", "data-series": l.name, "data-max": String(m) }));
    for (const [x, y] of dots) s.append(svg("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: "2.5", fill: l.colour }));
  }
  const legend = el("ul", { class: "plot-legend" }, ...lines.map((l) => {
    const li = el("li", {}, `${l.name}: ${unit(last(l.values) ?? 0)}`);
    li.style.setProperty("--c", l.colour);
    return li;
  }));
  return el("figure", { class: "plot", "data-plot": id }, el("figcaption", {}, title), s, legend);
}

const rate = (v: number): string => `${v.toFixed(v < 10 ? 1 : 0)}/s`;
const ms = (v: number): string => (v >= 1_000 ? `${(v / 1_000).toFixed(1)} s` : `${String(Math.round(v))} ms`);
const count = (v: number): string => String(Math.round(v));
const tokenRate = (v: number): string => `${v.toFixed(v < 10 ? 1 : 0)} tok/s`;

function render(m: MetricsJson, marks: readonly Mark[]): void {
  const colour = (i: number): string => palette[i % palette.length] ?? "#555";
  const models = (pick: (x: MetricsJson["models"][number]) => Column): Line[] => m.models.map((x, i) => ({ name: x.model, values: pick(x), colour: colour(i) }));
  const charts: HTMLElement[] = [
    chart("calls", "Calls per second, by model", m.times, models((x) => x.callsPerS), rate, marks),
    chart("p50", "Latency p50, by model", m.times, models((x) => x.p50Ms), ms, marks),
    chart("p99", "Latency p99, by model", m.times, models((x) => x.p99Ms), ms, marks),
    chart("in-flight", "Calls in flight, by model", m.times, models((x) => x.inFlight), count, marks),
    chart("tokens", "Tokens per second, by model", m.times, models((x) => x.tokensPerS), tokenRate, marks),
    chart("queued", "Calls waiting in admission, by model", m.times, models((x) => x.queued), count, marks),
  ];
  for (const n of m.nodes.slice(0, maxNodeCharts)) {
    charts.push(chart(`memory-${n.nodeId}`, `Memory on ${n.nodeId}: measured and accounted`, m.times, [{ name: "measured", values: n.measuredBytes, colour: palette[0] ?? "#555" }, { name: "accounted", values: n.accountedBytes, colour: palette[1] ?? "#555" }], formatBytes));
    // Each GPU's used memory beside its node's (Warden accounts per node: the node chart's accounted line is the sum it places against).
    if (n.gpus.length > 0) charts.push(chart(`gpus-${n.nodeId}`, `GPUs on ${n.nodeId}: used of total`, m.times, n.gpus.map((g, i) => ({ name: `GPU ${String(g.index)} of ${formatBytes(g.totalBytes)}`, values: g.usedBytes, colour: colour(i) })), formatBytes));
  }
  byId("plots").replaceChildren(...charts);
  const spanMs = (m.times[m.times.length - 1] ?? 0) - (m.times[0] ?? 0);
  const span = m.times.length < 2 ? "" : `, the last ${spanMs < 120_000 ? `${String(Math.round(spanMs / 1_000))} s` : `${String(Math.round(spanMs / 60_000))} min`}`;
  const left = m.leftOut.nodes + m.leftOut.models + m.leftOut.gpus === 0 ? "" : ` Not kept: ${String(m.leftOut.nodes)} nodes, ${String(m.leftOut.models)} models past the first 64 of each, ${String(m.leftOut.gpus)} GPUs past 8 a node or 128 in all.`;
  const more = m.nodes.length > maxNodeCharts ? ` Memory drawn for the first ${String(maxNodeCharts)} of ${String(m.nodes.length)} nodes.` : "";
  const info = byId("plots-info");
  info.textContent = `One sample every ${String(m.sampleMs / 1_000)} s, up to ${String(Math.round((m.capacity * m.sampleMs) / 60_000))} min kept (${String(m.times.length)} samples${span}).${more}${left}`;
  info.dataset.samples = String(m.times.length);
}

export function plotsPage(ctx: ConsoleContext): ConsolePage {
  let reading = false;
  /** Loads and evictions from the coordinator's event history (the marks; none when it cannot be read). */
  const readMarks = async (): Promise<Mark[]> => {
    const res = await fetch(`/api/dashboard/events?type=${markTypes}&limit=${String(maxMarks)}`, { headers: ctx.headers(), cache: "no-store" });
    if (!res.ok) return [];
    const events = ((await res.json()) as { events: { type: string; time?: string; model?: string; nodeId?: string }[] }).events;
    return events.flatMap((e) => {
      const atMs = Date.parse(e.time ?? "");
      if (Number.isNaN(atMs)) return [];
      const kind = e.type === "backend.loaded" ? ("load" as const) : ("eviction" as const);
      return [{ atMs, kind, text: `${kind === "load" ? "loaded" : "evicted"} ${e.model ?? ""}${e.nodeId === undefined ? "" : ` on ${e.nodeId}`} at ${new Date(atMs).toLocaleTimeString()}` }];
    });
  };
  const read = async (): Promise<number> => {
    const res = await fetch("/api/dashboard/metrics", { headers: ctx.headers(), cache: "no-store" });
    if (!res.ok) {
      byId("plots-info").textContent = `plots: ${await responseError(res)}`;
      return 5_000;
    }
    const m = (await res.json()) as MetricsJson;
    render(m, await readMarks().catch(() => []));
    return m.sampleMs;
  };
  /** Re-reads each sample period while the page is shown; stops when another page is. */
  const loop = async (): Promise<void> => {
    if (reading) return;
    reading = true;
    try {
      while (!byId("page-plots").hidden) {
        const waitMs = await read().catch(() => 5_000);
        await new Promise((r) => setTimeout(r, waitMs));
      }
    } finally {
      reading = false;
    }
  };
  return {
    id: "plots",
    title: "Plots",
    onShow() {
      void loop();
    },
  };
}
