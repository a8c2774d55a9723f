import type { DashboardEvent } from "../dashboard-view.js";
import { appendBounded, eventLine, type EventLine } from "../view-model.js";
import { responseError, type ConsoleContext, type ConsolePage } from "./console-context.js";
import { byId, el } from "./dom.js";

/** Lines the Events page shows at most (history and live tail together). */
const maxLines = 500;

interface Filter {
  readonly node: string;
  readonly model: string;
  /** Exact type or a prefix ending in "."; "" = any. */
  readonly type: string;
}

function matches(e: DashboardEvent, f: Filter): boolean {
  if (f.node !== "" && e.nodeId !== f.node) return false;
  if (f.model !== "" && e.model !== f.model) return false;
  if (f.type !== "" && !(f.type.endsWith(".") ? e.type.startsWith(f.type) : e.type === f.type)) return false;
  return true;
}

/**
 * Events: the coordinator's recent history (GET /api/dashboard/events, its
 * bounded ring) filtered by node, model and type, then the live tail from the
 * page's stream under the same filter. Events already shown (by id) are not
 * shown twice where history and tail overlap.
 */
export function eventsPage(ctx: ConsoleContext): ConsolePage {
  let lines: EventLine[] = [];
  let filter: Filter = { node: "", model: "", type: "" };
  /** Bumped per history read: a late answer to an older filter is dropped. */
  let reading = 0;
  let paused = false;

  const render = (): void => {
    byId("history").replaceChildren(...[...lines].reverse().map((l) => el("li", { "data-type": l.type, "data-tone": l.tone, "data-id": l.id }, el("time", {}, l.time === "" ? "" : new Date(l.time).toLocaleTimeString()), l.text)));
    byId("history-count").textContent = `${String(lines.length)} shown`;
  };

  const load = async (): Promise<void> => {
    const seq = ++reading;
    const q = new URLSearchParams({ limit: "500" });
    if (filter.node !== "") q.set("node", filter.node);
    if (filter.model !== "") q.set("model", filter.model);
    if (filter.type !== "") q.set("type", filter.type);
    const status = byId("history-status");
    const res = await fetch(`/api/dashboard/events?${q.toString()}`, { headers: ctx.headers(), cache: "no-store" }).catch(() => undefined);
    if (seq !== reading) return;
    if (res === undefined || !res.ok) {
      status.textContent = res === undefined ? "history unavailable (disconnected)" : await responseError(res);
      status.className = "action-result error";
      return;
    }
    const body = (await res.json()) as { events: DashboardEvent[]; capacity: number };
    if (seq !== reading) return;
    status.textContent = `history: the last ${String(body.capacity)} events this coordinator saw, then live`;
    status.className = "action-result";
    // Tail lines that came while the read ran stay, after the history they follow.
    const ids = new Set(body.events.map((e) => e.id ?? ""));
    lines = [...body.events.map(eventLine), ...lines.filter((l) => l.id !== "" && !ids.has(l.id))].slice(-maxLines);
    render();
  };

  const wire = (): void => {
    const form = byId("events-filter") as HTMLFormElement;
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const v = (id: string): string => (byId(id) as HTMLInputElement).value.trim().slice(0, 128);
      filter = { node: v("ev-node"), model: v("ev-model"), type: v("ev-type") };
      // The old filter's lines and status go at once: nothing on the page belongs to the old filter
      // while the new history is read (a reader, or a test, waiting for "then live" waits for this read).
      lines = [];
      render();
      const status = byId("history-status");
      status.textContent = "reading the history…";
      status.className = "action-result";
      void load();
    });
    const pause = byId("ev-pause");
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.setAttribute("aria-pressed", String(paused));
      pause.textContent = paused ? "Resume live tail" : "Pause live tail";
    });
  };
  let wired = false;

  return {
    id: "events",
    title: "Events",
    onShow: () => {
      if (!wired) {
        wired = true;
        wire();
      }
      void load();
    },
    onEvent: (e) => {
      if (paused || !matches(e, filter)) return;
      lines = appendBounded(lines, eventLine(e), maxLines);
      if (!(byId("page-events")).hidden) render();
    },
  };
}
