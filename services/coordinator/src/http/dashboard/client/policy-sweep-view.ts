import type { SweepPoint, SweepResult, SweepRow } from "../sweep-view.js";
import { responseError, type ConsoleContext } from "./console-context.js";
import { byId, el } from "./dom.js";

const svgNs = "http://www.w3.org/2000/svg";

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Readonly<Record<string, string>> = {}, ...children: (Node | string)[]): SVGElementTagNameMap[K] {
  const e = document.createElementNS(svgNs, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

/** "idleTimeoutMs=60000 limitPerNode=2"; the live policy's row is "live policy". */
export function describePoint(p: SweepPoint): string {
  const parts = Object.entries(p).map(([k, v]) => `${k}=${String(v)}`);
  return parts.length === 0 ? "live policy" : parts.join(" ");
}

const gib = (b: number): string => `${(b / 1024 ** 3).toFixed(1)} GiB`;
const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
/** Hours with two significant digits below 1 (a short trace's idle time is a small fraction of an hour). */
export const hours = (h: number): string => (h === 0 ? "0" : h >= 1 ? h.toFixed(2) : h.toPrecision(2));

/**
 * Cold starts (y) against GPU-hours held idle (x), one dot per row, the
 * Pareto front filled: plain SVG (no plotting library), each dot titled.
 */
function plot(rows: readonly SweepRow[]): SVGSVGElement {
  const w = 420;
  const h = 240;
  const pad = 40;
  const maxX = Math.max(...rows.map((r) => r.idleInstanceHours), 1e-9);
  const maxY = Math.max(...rows.map((r) => r.coldStarts), 1);
  const x = (v: number): number => pad + (v / maxX) * (w - 2 * pad);
  const y = (v: number): number => h - pad - (v / maxY) * (h - 2 * pad);
  const g = svg("svg", { id: "sweep-plot", viewBox: `0 0 ${String(w)} ${String(h)}`, width: String(w), height: String(h), role: "img", "aria-label": "cold starts against GPU-hours held idle, one dot per candidate" });
  g.append(
    svg("line", { x1: String(pad), y1: String(h - pad), x2: String(w - pad), y2: String(h - pad), stroke: "#888" }),
    svg("line", { x1: String(pad), y1: String(pad), x2: String(pad), y2: String(h - pad), stroke: "#888" }),
    svg("text", { x: String(w / 2), y: String(h - 8), "text-anchor": "middle", "font-size": "11" }, `GPU-hours held idle (0 – ${hours(maxX)})`),
    svg("text", { x: "12", y: String(h / 2), "text-anchor": "middle", "font-size": "11", transform: `rotate(-90 12 ${String(h / 2)})` }, `cold starts (0 – ${String(maxY)})`),
  );
  rows.forEach((r, i) => {
    const live = Object.keys(r.point).length === 0;
    const dot = svg("circle", { cx: x(r.idleInstanceHours).toFixed(1), cy: y(r.coldStarts).toFixed(1), r: live ? "6" : "5", fill: r.pareto ? "#2a7" : "#fff", stroke: live ? "#c40" : "#2a7", "stroke-width": "2", "data-row": String(i), "data-pareto": String(r.pareto) });
    dot.append(svg("title", {}, `${describePoint(r.point)}: ${String(r.coldStarts)} cold starts, ${hours(r.idleInstanceHours)} GPU-hours idle`));
    g.append(dot);
  });
  return g;
}

function table(rows: readonly SweepRow[], apply: ((p: SweepPoint) => void) | undefined): HTMLTableElement {
  const head = el("tr", {}, ...["candidate", "cold starts", "evictions", "calls that waited", "wait p50 / p99", "failed", "peak memory", "GPU-hours idle", "Pareto"].map((t) => el("th", {}, t)));
  if (apply !== undefined) head.append(el("th", {}, ""));
  const body = rows.map((r, i) => {
    const reasons = Object.entries(r.evictionsByReason).map(([k, v]) => `${k} ${String(v)}`).join(", ");
    const tr = el(
      "tr",
      { "data-row": String(i), "data-point": describePoint(r.point) },
      el("td", {}, describePoint(r.point)),
      el("td", { "data-col": "coldStarts" }, String(r.coldStarts)),
      el("td", { "data-col": "evictions", title: reasons }, reasons === "" ? "0" : `${String(r.evictions)} (${reasons})`),
      el("td", { "data-col": "callsWaited" }, String(r.callsWaited)),
      el("td", { "data-col": "wait" }, `${secs(r.waitP50Ms)} / ${secs(r.waitP99Ms)}`),
      el("td", { "data-col": "failedCalls" }, String(r.failedCalls)),
      el("td", { "data-col": "peakBytes" }, gib(r.peakBytes)),
      el("td", { "data-col": "idleInstanceHours" }, hours(r.idleInstanceHours)),
      el("td", {}, r.pareto ? "★" : ""),
    );
    if (apply !== undefined) {
      const cell = el("td", {});
      if (Object.keys(r.point).length > 0) {
        const b = el("button", { type: "button", class: "act", "data-apply": String(i) }, "Apply");
        b.addEventListener("click", () => {
          apply(r.point);
        });
        cell.append(b);
      }
      tr.append(cell);
    }
    return tr;
  });
  return el("table", { id: "sweep-table", class: "sweep-table" }, el("thead", {}, head), el("tbody", {}, ...body));
}

/** "60000, 300000" or "true, false" → values; empty → none. */
function values(text: string): (number | boolean)[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
    .map((s) => (s === "true" || s === "false" ? s === "true" : Number(s)));
}

/**
 * The Policy page's what-if sweep: for a role that may call UpdatePolicy, a
 * form (two axes over the policy's fields), the result as a plot and a table
 * (evictions, cold starts, waits, peak memory per candidate) and an Apply
 * button per candidate that sends its fields through UpdatePolicy. Other
 * roles see a note only: a sweep spends the coordinator's CPU.
 */
export function sweepSection(ctx: ConsoleContext, editable: boolean, applied: (point: SweepPoint) => Promise<void>): HTMLElement {
  const out = el("div", { id: "sweep-result", role: "status" });
  if (!editable) return el("section", { id: "policy-sweep", "aria-label": "what-if sweep" }, el("h3", {}, "What-if sweep"), el("p", { class: "muted" }, "An operator can replay this coordinator's recorded workload under other policies here."));
  const axisInput = (n: number, field: string, vals: string): HTMLElement =>
    el(
      "div",
      { class: "policy-row" },
      el("label", { for: `sweep-field-${String(n)}` }, `Axis ${String(n + 1)}`),
      el("select", { id: `sweep-field-${String(n)}` }, ...["", "idleTimeoutMs", "limitPerNode", "idleCheck", "busyTimeoutMs", "memoryThreshold", "memoryReclaimer", "sizeAware"].map((f) => {
        const o = el("option", { value: f }, f === "" ? "(none)" : f);
        if (f === field) o.selected = true;
        return o;
      })),
      el("input", { id: `sweep-values-${String(n)}`, type: "text", value: vals, "aria-label": `axis ${String(n + 1)} values, comma-separated` }),
    );
  const run = el("button", { type: "submit", class: "act", id: "sweep-run" }, "Run sweep");
  const form = el("form", { id: "sweep-form", class: "policy-form", "aria-label": "what-if sweep" }, axisInput(0, "idleTimeoutMs", "60000, 300000, 900000"), axisInput(1, "", ""), el("p", { class: "muted" }, "Replays the last 24 h of this coordinator's workload trace under the live policy and each candidate (at most 16)."), run);
  const status = (text: string, error: boolean): void => {
    out.replaceChildren(el("p", { class: error ? "action-result error" : "action-result" }, text));
  };
  const apply = async (p: SweepPoint): Promise<void> => {
    status(`applying ${describePoint(p)}…`, false);
    const res = await fetch("/api/dashboard/policy", { method: "POST", headers: ctx.headers(true), body: JSON.stringify(p) }).catch(() => undefined);
    if (res === undefined || !res.ok) {
      status(`not applied — ${res === undefined ? "disconnected" : await responseError(res)}`, true);
      return;
    }
    await applied(p);
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const axes = [0, 1].flatMap((n) => {
      const field = (byId(`sweep-field-${String(n)}`) as HTMLSelectElement).value;
      const vals = values((byId(`sweep-values-${String(n)}`) as HTMLInputElement).value);
      return field === "" || vals.length === 0 ? [] : [{ field, values: vals }];
    });
    void (async () => {
      run.disabled = true;
      status("replaying…", false);
      try {
        const res = await fetch("/api/dashboard/policy/sweep", { method: "POST", headers: ctx.headers(true), body: JSON.stringify({ axes }) }).catch(() => undefined);
        if (res === undefined || !res.ok) {
          status(`sweep failed — ${res === undefined ? "disconnected" : await responseError(res)}`, true);
          return;
        }
        const r = (await res.json()) as SweepResult;
        out.replaceChildren(
          el("p", { class: "muted", id: "sweep-summary" }, `${String(r.calls)} calls over ${(r.spanMs / 60_000).toFixed(1)} min on ${String(r.nodes)} nodes, replayed ${String(r.rows.length)} times in ${(r.elapsedMs / 1000).toFixed(1)} s. ★ = Pareto front (no other candidate has fewer cold starts and fewer idle GPU-hours).`),
          plot(r.rows),
          table(r.rows, (p) => void apply(p)),
        );
      } finally {
        run.disabled = false;
      }
    })();
  });
  return el("section", { id: "policy-sweep", "aria-label": "what-if sweep" }, el("h3", {}, "What-if sweep"), form, out);
}
