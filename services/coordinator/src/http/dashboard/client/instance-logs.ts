/**
 * A backend's recent output on its instance's row (Nodes page): the Logs
 * button fetches GetInstanceLogs through /api/dashboard/logs and the lines
 * show in a row under the instance's, kept across the snapshots that redraw
 * the cards until closed. At most `maxOpen` are open (the oldest closes).
 */
import { responseError } from "./console-context.js";
import { el } from "./dom.js";

/** Lines asked per stream. */
const logLines = 100;
const maxOpen = 8;

type LogsView = { t: "loading" } | { t: "shown"; stdout: string[]; stderr: string[]; at: string } | { t: "failed"; why: string };

export class InstanceLogs {
  private readonly open = new Map<string, LogsView>();

  constructor(
    private readonly headers: () => Record<string, string>,
    /** Redraws the cards (a fetch finished). */
    private readonly redraw: () => void,
  ) {}

  button(incarnation: string, model: string): HTMLElement {
    const shown = this.open.has(incarnation);
    const b = el("button", { type: "button", class: "act small", "data-action": "logs", "aria-expanded": String(shown), "aria-label": `${shown ? "hide" : "show"} logs of ${model} (${incarnation})` }, shown ? "Hide logs" : "Logs");
    b.addEventListener("click", () => {
      if (this.open.has(incarnation)) this.open.delete(incarnation);
      else void this.fetch(incarnation);
      this.redraw();
    });
    return b;
  }

  /** The row under the instance's, or undefined when its logs are not open. */
  row(incarnation: string, columns: number): HTMLElement | undefined {
    const v = this.open.get(incarnation);
    if (v === undefined) return undefined;
    const cell = el("td", { colspan: String(columns) });
    if (v.t === "loading") cell.append(el("span", { class: "muted" }, "reading the backend's logs…"));
    else if (v.t === "failed") cell.append(el("span", { class: "drift-high" }, `logs: ${v.why}`));
    else {
      const block = (name: string, lines: string[]): HTMLElement =>
        el("div", { class: "log-block" }, el("strong", {}, `${name} (last ${String(lines.length)} lines, read ${new Date(v.at).toLocaleTimeString()})`), el("pre", { "data-stream": name, tabindex: "0" }, lines.length === 0 ? "(nothing)" : lines.join("\n")));
      cell.append(block("stderr", v.stderr), block("stdout", v.stdout));
    }
    return el("tr", { class: "logs-row", "data-logs-for": incarnation }, cell);
  }

  private async fetch(incarnation: string): Promise<void> {
    this.open.set(incarnation, { t: "loading" });
    if (this.open.size > maxOpen) this.open.delete(this.open.keys().next().value as string);
    let v: LogsView;
    try {
      const res = await fetch(`/api/dashboard/logs?incarnation=${encodeURIComponent(incarnation)}&lines=${String(logLines)}`, { headers: this.headers(), cache: "no-store" });
      if (!res.ok) v = { t: "failed", why: await responseError(res) };
      else {
        const r = (await res.json()) as { stdout: string[]; stderr: string[] };
        v = { t: "shown", stdout: r.stdout, stderr: r.stderr, at: new Date().toISOString() };
      }
    } catch (err) {
      v = { t: "failed", why: err instanceof Error ? err.message : String(err) };
    }
    // Closed meanwhile: stays closed.
    if (!this.open.has(incarnation)) return;
    this.open.set(incarnation, v);
    this.redraw();
  }
}
