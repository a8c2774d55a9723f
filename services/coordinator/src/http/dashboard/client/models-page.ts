import type { DashboardEvent, DashboardSnapshot } from "../dashboard-view.js";
import { modelRows, type ModelRow } from "../models-view.js";
import { formatBytes } from "../view-model.js";
import { lastLoadStderr, may, responseError, type ConsoleContext, type ConsolePage } from "./console-context.js";
import { byId, el } from "./dom.js";

/**
 * Models: every configured model, loaded or not — state, replicas
 * ready/desired, bounds min..max, where it runs, last used — with Load,
 * Unload and Scale for a role that may (the same /api/dashboard/actions the
 * Nodes page's buttons call). Each result is tied to its action: a late
 * answer to an older press never replaces a newer one's.
 */
export function modelsPage(ctx: ConsoleContext): ConsolePage {
  /** Per model, the newest backend.load-failed event's words (cleared by its backend.loaded): the page's memory, from the stream and the history. */
  const lastFailure = new Map<string, string>();
  const noteEvent = (e: DashboardEvent): void => {
    if (e.model === undefined) return;
    if (e.type === "backend.loaded") lastFailure.delete(e.model);
    const f = (e as { backendLoadFailed?: { message?: unknown; lastStderrLine?: unknown } }).backendLoadFailed;
    if (e.type === "backend.load-failed" && f !== undefined) lastFailure.set(e.model, `${typeof f.message === "string" ? f.message : "failed"}${typeof f.lastStderrLine === "string" && f.lastStderrLine !== "" ? ` — stderr: ${f.lastStderrLine}` : ""}`);
  };
  let seeded = false;
  /** Once: the failures and loads the coordinator saw before the page opened. */
  const seed = async (): Promise<void> => {
    seeded = true;
    const res = await fetch("/api/dashboard/events?type=backend.loaded,backend.load-failed&limit=500", { headers: ctx.headers(), cache: "no-store" }).catch(() => undefined);
    if (res?.ok !== true) return;
    for (const e of ((await res.json()) as { events: DashboardEvent[] }).events) noteEvent(e);
    const s = ctx.snapshot();
    if (s !== undefined) render(s);
  };

  /** Bumped by each press; an answer shows only while its number is the latest. */
  let pressed = 0;
  /** Rows last drawn, so an unchanged snapshot does not rebuild the table (and lose a half-typed bound). */
  let drawn = "";

  /** Answers that came after a newer press (counted on the element, data-stale, for tests and curious operators). */
  let stale = 0;
  const result = (seq: number, text: string, error: boolean): void => {
    const r = byId("models-result");
    if (seq !== pressed) {
      r.dataset.stale = String(++stale);
      return;
    }
    r.textContent = text;
    r.className = error ? "action-result error" : "action-result";
    r.dataset.seq = String(seq);
  };

  const act = async (action: string, body: Record<string, unknown>, what: string): Promise<void> => {
    const seq = ++pressed;
    result(seq, `${what}…`, false);
    let res: Response;
    try {
      res = await fetch(`/api/dashboard/actions/${action}`, { method: "POST", headers: ctx.headers(true), body: JSON.stringify(body) });
    } catch (err) {
      result(seq, `${what} failed — ${err instanceof Error ? err.message : String(err)}`, true);
      return;
    }
    if (!res.ok) {
      const why = await responseError(res);
      result(seq, `${what} failed — ${why}`, true);
      // A load whose backend died: its own last words say why far better than an exit code.
      const stderr = action === "load" && typeof body.model === "string" ? await lastLoadStderr(ctx, body.model) : "";
      if (stderr !== "") result(seq, `${what} failed — ${why}; the backend's last stderr line: ${stderr}`, true);
      return;
    }
    const r = (await res.json()) as { outcome?: string; instance?: { nodeId?: string }; replicas?: { min: number; max: number } };
    const detail = r.instance?.nodeId !== undefined ? ` on ${r.instance.nodeId}` : r.outcome !== undefined ? `: ${r.outcome}` : r.replicas !== undefined ? `: replicas ${String(r.replicas.min)}..${String(r.replicas.max)}` : "";
    result(seq, `${what} done${detail}`, false);
  };

  const button = (label: string, onClick: () => void, cls = "act small"): HTMLButtonElement => {
    const b = el("button", { type: "button", class: cls }, label);
    b.addEventListener("click", onClick);
    return b;
  };

  const scaleForm = (row: ModelRow): HTMLElement => {
    const min = el("input", { type: "number", min: "0", max: "1024", value: String(row.min), "aria-label": `minimum replicas of ${row.model}`, class: "bound" });
    const max = el("input", { type: "number", min: "0", max: "1024", value: String(row.max), "aria-label": `maximum replicas of ${row.model}`, class: "bound" });
    const form = el("form", { class: "scale-form", "data-scale": row.model }, min, "..", max, el("button", { type: "submit", class: "act small" }, "Scale"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      void act("scale", { model: row.model, min: Number(min.value), max: Number(max.value) }, `scale ${row.model} to ${min.value}..${max.value}`);
    });
    return form;
  };

  const render = (s: DashboardSnapshot): void => {
    const rows = modelRows(s, Date.now());
    const canLoad = may(ctx, "load");
    const canUnload = may(ctx, "unload");
    const canScale = may(ctx, "scale");
    const key = JSON.stringify([rows, canLoad, canUnload, canScale, [...lastFailure]]);
    if (key === drawn) return;
    drawn = key;
    const body = el("tbody");
    for (const r of rows) {
      const actions = el("td", { class: "actions", "data-label": "actions" });
      if (canLoad) actions.append(button("Load", () => void act("load", { model: r.model }, `load ${r.model}`)));
      if (canUnload && r.loaded) actions.append(button("Unload", () => void act("unload", { model: r.model }, `unload ${r.model}`)));
      if (canScale && r.bounds !== "") actions.append(scaleForm(r));
      const state = el("td", { "data-label": "state" }, el("span", { class: "state", "data-state": r.state }, r.state));
      if (r.blockedBy !== "") state.append(el("div", { class: "detail" }, r.blockedBy));
      const failed = lastFailure.get(r.model);
      if (failed !== undefined && !r.loaded) state.append(el("div", { class: "detail", "data-failure": r.model }, `last load failed: ${failed}`));
      // A load waiting or in progress, and a failed one the events did not already explain (e.g. loadWait ran out).
      if (r.job !== "" && !(r.jobState === "failed" && failed !== undefined)) state.append(el("div", { class: "detail", "data-load-job": r.model, "data-job-state": r.jobState }, `load job: ${r.job}`));
      body.append(
        el("tr", { "data-model": r.model, "data-state": r.state },
          el("th", { scope: "row" }, r.model, r.pinned ? el("span", { class: "pin", title: "pinned: never evicted by policy" }, " (pinned)") : ""),
          state,
          el("td", { class: "num", "data-label": "replicas ready/desired" }, r.replicas),
          el("td", { class: "num", "data-label": "min..max" }, r.bounds),
          el("td", { "data-label": "where" }, r.nodes.join(", ")),
          el("td", { "data-label": "last used" }, r.lastUsed),
          el("td", { class: "num", "data-label": "size" }, r.sizeBytes > 0 ? formatBytes(r.sizeBytes) : ""),
          el("td", { "data-label": "backend" }, r.backend),
          actions,
        ),
      );
    }
    const head = el("thead", {}, el("tr", {}, ...["model", "state", "replicas ready/desired", "min..max", "where", "last used", "size", "backend", "actions"].map((h) => el("th", { scope: "col" }, h))));
    byId("models").replaceChildren(rows.length === 0 ? el("p", { class: "muted" }, "no models configured") : el("table", { class: "grid" }, head, body));
  };

  return {
    id: "models",
    title: "Models",
    // Drawn while shown only (onShow draws the latest): a hidden table is work the first paint would wait for.
    onSnapshot: (s) => {
      if (!byId("page-models").hidden) render(s);
    },
    onShow: () => {
      const s = ctx.snapshot();
      if (s !== undefined) render(s);
      if (!seeded) void seed();
    },
    onEvent: (e) => {
      if (e.type !== "backend.loaded" && e.type !== "backend.load-failed") return;
      noteEvent(e);
      const s = ctx.snapshot();
      if (s !== undefined) render(s);
    },
  };
}
