/**
 * The Nodes page's event list: the newest `maxLines` events, newest first.
 * When the page opens it is seeded from the coordinator's event history (GET
 * /api/dashboard/events, its in-memory ring), so it shows what happened just
 * before rather than starting empty; the stream's events follow. An event the
 * stream brought while the history was read is shown once (by id).
 */
import type { DashboardEvent } from "../dashboard-view.js";
import { appendBounded, eventLine, type EventLine } from "../view-model.js";
import { byId, el } from "./dom.js";

/** Lines the list keeps (and asks the history for). */
export const maxEventLines = 200;

export class NodeEvents {
  private lines: EventLine[] = [];

  constructor(private readonly headers: () => Record<string, string>) {}

  add(e: DashboardEvent): void {
    this.lines = appendBounded(this.lines, eventLine(e), maxEventLines);
    this.render();
  }

  /** Reads the history once and puts it before what the stream brought; a failed read leaves the list as it is. */
  async seed(): Promise<void> {
    const res = await fetch(`/api/dashboard/events?limit=${String(maxEventLines)}`, { headers: this.headers(), cache: "no-store" }).catch(() => undefined);
    if (res?.ok !== true) return;
    const body = (await res.json().catch(() => undefined)) as { events?: DashboardEvent[] } | undefined;
    if (body?.events === undefined) return;
    const ids = new Set(body.events.map((e) => e.id ?? ""));
    this.lines = [...body.events.map(eventLine), ...this.lines.filter((l) => l.id === "" || !ids.has(l.id))].slice(-maxEventLines);
    this.render();
  }

  private render(): void {
    byId("events").replaceChildren(
      ...[...this.lines].reverse().map((l) => el("li", { "data-type": l.type, "data-tone": l.tone, "data-id": l.id }, el("time", {}, l.time === "" ? "" : new Date(l.time).toLocaleTimeString()), l.text)),
    );
  }
}
