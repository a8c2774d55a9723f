/**
 * The dashboard in the browser: one event stream (a snapshot, then events and
 * fresh snapshots) rendered through the pure view model, plus ExplainPlacement
 * and the operator's buttons. Every string from the server goes in as text
 * (textContent), never as markup. Bundled at build time (build-client.mjs).
 */
import type { DashboardErrorBody, DashboardEvent, DashboardSnapshot, DashboardWhoAmI } from "../dashboard-view.js";
import { formatBytes, kindStyles, loadJobText, type InstanceKind } from "../view-model.js";
import { parseSse } from "../sse-parse.js";
import { maxFilterChars, nodeWindow, type StateChoice, type WindowCard } from "../node-window.js";
import { driftNote } from "../drift-note.js";
import { applyBusy, type BusyFrame } from "../busy-frame.js";
import { byId, el } from "./dom.js";
import { Router } from "./router.js";
import { modelsPage } from "./models-page.js";
import { eventsPage } from "./events-page.js";
import { policyPage } from "./policy-page.js";
import { playgroundPage } from "./playground-page.js";
import { plotsPage } from "./plots-page.js";
import { may, type ConsoleContext } from "./console-context.js";
import { InstanceLogs } from "./instance-logs.js";
import { HaFollower, type ConnState } from "./ha-follower.js";
import { NodeActions } from "./node-actions.js";
import { PlacementExplain } from "./placement-explain.js";
import { NodeEvents } from "./node-events.js";
import type { NodeAction } from "../node-action-text.js";

const tokenKey = "warden.dashboard.token";

interface State {
  token: string;
  who: DashboardWhoAmI | undefined;
  snapshot: DashboardSnapshot | undefined;
  retryMs: number;
  /** The node panel's filter box, state group and page (node-window.ts). */
  filter: string;
  stateChoice: StateChoice;
  page: number;
}

const state: State = { token: sessionStorage.getItem(tokenKey) ?? "", who: undefined, snapshot: undefined, retryMs: 1_000, filter: "", stateChoice: "all", page: 0 };

function headers(json = false): Record<string, string> {
  const h: Record<string, string> = {};
  if (state.token !== "") h.authorization = `Bearer ${state.token}`;
  if (json) h["content-type"] = "application/json";
  return h;
}

/** The console's other pages (Models, Events, Policy, Playground) beside the Nodes panel: router.ts. */
const consoleCtx: ConsoleContext = { headers, who: () => state.who, snapshot: () => state.snapshot };
const router = new Router([{ id: "nodes", title: "Nodes" }, modelsPage(consoleCtx), eventsPage(consoleCtx), policyPage(consoleCtx), playgroundPage(consoleCtx), plotsPage(consoleCtx)]);

async function errorText(res: Response): Promise<string> {
  try {
    const b = (await res.json()) as DashboardErrorBody;
    return `${b.error.code}: ${b.error.message}`;
  } catch {
    return `HTTP ${String(res.status)}`;
  }
}

function setConn(s: ConnState, text: string): void {
  const c = byId("conn");
  c.dataset.state = s;
  c.textContent = text;
  // The page greys while not live (CSS): what it shows may be stale.
  document.body.dataset.conn = s;
}

/** Follows the HA leader (ha-follower.ts). */
const ha = new HaFollower(headers, setConn);

function badge(kind: InstanceKind): HTMLElement {
  const s = kindStyles[kind];
  const b = el("span", { class: "badge", "data-kind": kind }, s.label);
  b.style.background = s.colour;
  return b;
}

function renderLegend(): void {
  const legend = byId("legend");
  legend.replaceChildren(...(["loading", "ready", "busy", "pending-eviction", "leftover", "orphan", "foreign"] as const).map(badge));
}

function bar(measuredPct: number, accountedPct: number): HTMLElement {
  const measured = el("div", { class: "measured" });
  measured.style.width = `${String(measuredPct)}%`;
  const accounted = el("div", { class: "accounted" });
  accounted.style.width = `${String(accountedPct)}%`;
  return el("div", { class: "bar" }, measured, accounted);
}

/** The Nodes page's buttons and what they say (node-actions.ts). */
const actions = new NodeActions(consoleCtx);
/** Placement's Explain, dated and re-asked while shown (placement-explain.ts). */
const placement = new PlacementExplain(headers, () => !byId("page-nodes").hidden);
/** The Nodes page's event list, seeded from the history (node-events.ts). */
const nodeEvents = new NodeEvents(headers);

function actionButton(label: string, a: NodeAction): HTMLElement {
  const b = el("button", { type: "button", class: "act small", "data-action": a.t }, label);
  b.addEventListener("click", () => void actions.press(a));
  return b;
}

/** Backend logs opened on instance rows (instance-logs.ts). */
const logs = new InstanceLogs(headers, () => { renderSnapshot(); });

function nodeCard(c: WindowCard, canAct: boolean): HTMLElement {
  const mayLogs = may(consoleCtx, "logs");
  const m = c.memory;
  const what = m.source === "gpu" ? "GPU memory" : m.source === "ram" ? "RAM (no GPU reported)" : "memory not reported";
  const note = driftNote(m);
  const drift = el("span", { class: note.high ? "drift drift-high" : "drift", title: note.title, tabindex: "0" }, `drift ${formatBytes(m.driftBytes)}`);
  const label = el("div", { class: "bar-label" }, `${what}: total ${formatBytes(m.totalBytes)} · agent measures ${formatBytes(m.measuredBytes)} · Warden accounts ${formatBytes(m.accountedBytes)} · `, drift);
  const head = el("div", { class: "node-head" }, el("h3", {}, c.title), el("span", { class: "node-status" }, c.status));
  if (canAct) head.append(c.draining ? actionButton("Undrain", { t: "undrain", nodeId: c.nodeId }) : actionButton("Drain", { t: "drain", nodeId: c.nodeId }));
  const parts: HTMLElement[] = [head, bar(m.measuredPct, m.accountedPct), label];
  for (const g of c.gpus) parts.push(el("div", { class: "bar-label" }, `${g.label}: ${formatBytes(g.usedBytes)} of ${formatBytes(g.totalBytes)}`), bar(g.usedPct, 0));
  const body = el("tbody");
  for (const r of c.rows) {
    const tr = el("tr", { "data-incarnation": r.key, "data-kind": r.kind, "data-model": r.model }, el("td", {}, badge(r.kind)), el("td", { class: "model" }, r.model), el("td", {}, String(r.inFlight)), el("td", {}, r.lastUsed), el("td", {}, r.sizeBytes > 0 ? formatBytes(r.sizeBytes) : ""), el("td", { class: "detail" }, r.detail));
    const cell = el("td");
    if (canAct && r.kind !== "foreign" && r.kind !== "orphan") cell.append(actionButton("Unload", { t: "unload", model: r.model }));
    if (mayLogs && r.kind !== "foreign" && r.kind !== "orphan") cell.append(logs.button(r.key, r.model));
    tr.append(cell);
    body.append(tr);
    const logRow = logs.row(r.key, 7);
    if (logRow !== undefined) body.append(logRow);
  }
  const table = el("table", { class: "instances" }, el("thead", {}, el("tr", {}, ...["state", "model", "in flight", "last used", "size", "detail", ""].map((h) => el("th", {}, h)))), body);
  if (c.rows.length === 0) parts.push(el("p", { class: "muted" }, "no instances"));
  else parts.push(table);
  if (c.hiddenRows > 0) parts.push(el("p", { class: "more-rows" }, `${String(c.hiddenRows)} more (warden models ls --node ${c.nodeId})`));
  return el("div", { class: "node", "data-node-id": c.nodeId }, ...parts);
}

function renderSnapshot(): void {
  const s = state.snapshot;
  if (s === undefined) return;
  const canAct = state.who?.canAct === true;
  const w = nodeWindow(s, { filter: state.filter, state: state.stateChoice, page: state.page }, Date.now());
  state.page = w.page;
  const empty = s.nodes.length === 0 ? "no nodes registered" : "no node matches the filter";
  byId("nodes").replaceChildren(...(w.cards.length === 0 ? [el("p", { class: "muted" }, empty)] : w.cards.map((c) => nodeCard(c, canAct))));
  byId("node-groups").replaceChildren(
    // "not reported since restart" only while some node is: after a restart, until every known node reported.
    ...(["all", "ready", "unreachable", "lost", "not reported since restart"] as const).filter((k) => k !== "not reported since restart" || w.counts[k] > 0).map((k) => {
      const b = el("button", { type: "button", "data-state": k, "aria-pressed": String(state.stateChoice === k) }, `${k} ${String(w.counts[k])}`);
      b.addEventListener("click", () => {
        state.stateChoice = k;
        state.page = 0;
        renderSnapshot();
      });
      return b;
    }),
  );
  const info = byId("page-info");
  info.textContent = w.matching === 0 ? "0 nodes" : `${String(w.first)}–${String(w.first + w.cards.length - 1)} of ${String(w.matching)}`;
  info.dataset.matching = String(w.matching);
  (byId("page-prev") as HTMLButtonElement).disabled = w.page === 0;
  (byId("page-next") as HTMLButtonElement).disabled = w.page >= w.pages - 1;
  const select = (byId("explain-model") as HTMLSelectElement);
  const chosen = select.value;
  const names = s.models.map((m) => m.model);
  if (names.join("\n") !== [...select.options].map((o) => o.value).join("\n")) {
    select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(chosen)) select.value = chosen;
  }
  byId("nodes").dataset.at = s.at;
  // Loads waiting for a node, loading or failed (ListModels' load jobs).
  const jobs = s.models.flatMap((m) => (m.loadJob === undefined ? [] : [el("li", { "data-state": m.loadJob.state, "data-model": m.model }, loadJobText(m.model, m.loadJob))]));
  byId("load-jobs").replaceChildren(...(jobs.length === 0 ? [el("li", { class: "muted" }, "none")] : jobs));
}

let renderQueued = false;

/** One render for the busy frames of one turn (a burst of calls redraws once). */
function queueRender(): void {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    renderSnapshot();
    if (state.snapshot !== undefined) router.snapshot(state.snapshot);
  }, 0);
}

function onMessage(event: string, data: string): void {
  if (event === "snapshot") {
    state.snapshot = JSON.parse(data) as DashboardSnapshot;
    renderSnapshot();
    router.snapshot(state.snapshot);
    placement.onSnapshot();
    void ha.refresh();
  } else if (event === "event") {
    const e = JSON.parse(data) as DashboardEvent;
    nodeEvents.add(e);
    router.event(e);
  } else if (event === "busy") {
    // Pushed as calls begin and end: busy and idle show without waiting for the next snapshot.
    if (state.snapshot !== undefined && applyBusy(state.snapshot, JSON.parse(data) as BusyFrame)) queueRender();
  } else if (event === "error") {
    // The coordinator ends the stream after this (e.g. the token was revoked): say why.
    const e = (JSON.parse(data) as { error?: { message?: string } }).error;
    setConn("error", e?.message ?? "the stream ended with an error");
  }
}

function openStream(signal?: AbortSignal): Promise<Response> {
  return fetch("/api/dashboard/stream", { headers: headers(), cache: "no-store", ...(signal === undefined ? {} : { signal }) });
}

/** Reads one stream to its end; `opened`: a request already sent (the first one, sent with the page's other first asks). */
async function stream(opened?: Promise<Response>): Promise<void> {
  setConn("connecting", "connecting…");
  const res = await (opened ?? openStream());
  // A token that may not read (revoked, or not a viewer's): ask for another one.
  if (res.status === 401 || res.status === 403) byId("token-form").hidden = false;
  if (!res.ok || res.body === null) throw new Error(await errorText(res));
  setConn("live", "live");
  state.retryMs = 1_000;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const parsed = parseSse(buf + value);
    buf = parsed.rest;
    for (const m of parsed.messages) onMessage(m.event, m.data);
  }
  throw new Error("stream ended");
}

/** Follows the stream forever: each reconnect starts from a fresh snapshot; waits grow to 15 s. */
async function follow(first?: Promise<Response>): Promise<void> {
  let opened = first;
  for (;;) {
    try {
      await stream(opened);
    } catch (err) {
      opened = undefined;
      setConn("error", `disconnected (${err instanceof Error ? err.message : String(err)}); retrying`);
    }
    // The member may have stopped leading, or answering: follow the leader before reconnecting.
    await ha.settle();
    await new Promise((r) => setTimeout(r, state.retryMs));
    state.retryMs = Math.min(15_000, state.retryMs * 2);
  }
}

async function whoAmI(): Promise<boolean> {
  const res = await fetch("/api/dashboard/whoami", { headers: headers(), cache: "no-store" });
  const form = byId("token-form");
  if (res.status === 401 || res.status === 403) {
    form.hidden = false;
    setConn("error", await errorText(res));
    return false;
  }
  if (!res.ok) throw new Error(await errorText(res));
  state.who = (await res.json()) as DashboardWhoAmI;
  form.hidden = !state.who.authOn;
  byId("who").textContent = state.who.authOn ? `as ${state.who.name} (${state.who.role})` : "auth off";
  byId("load-button").hidden = !state.who.canAct;
  byId("unload-button").hidden = !state.who.canAct;
  return true;
}

function wire(): void {
  renderLegend();
  const filter = byId("node-filter") as HTMLInputElement;
  filter.addEventListener("input", () => {
    state.filter = filter.value.slice(0, maxFilterChars);
    state.page = 0;
    renderSnapshot();
  });
  byId("page-prev").addEventListener("click", () => {
    state.page = Math.max(0, state.page - 1);
    renderSnapshot();
  });
  byId("page-next").addEventListener("click", () => {
    state.page++;
    renderSnapshot();
  });
  byId("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = (byId("token") as HTMLInputElement).value.trim();
    sessionStorage.setItem(tokenKey, state.token);
    location.reload();
  });
  const select = (byId("explain-model") as HTMLSelectElement);
  byId("explain-form").addEventListener("submit", (e) => {
    e.preventDefault();
    if (select.value !== "") placement.explain(select.value);
  });
  byId("load-button").addEventListener("click", () => {
    if (select.value !== "") void actions.press({ t: "load", model: select.value });
  });
  byId("unload-button").addEventListener("click", () => {
    if (select.value !== "") void actions.press({ t: "unload", model: select.value });
  });
}

async function main(): Promise<void> {
  wire();
  // The first paint waits for one round trip, not three: the stream (the
  // server builds its snapshot meanwhile), the HA check and whoami go out
  // together. The early stream and whoami count only when this origin served
  // at the first ask; otherwise (a standby, a member that did not answer)
  // they are dropped and asked again once the page has settled.
  const early = new AbortController();
  const firstStream = openStream(early.signal);
  firstStream.catch(() => undefined);
  const firstWho = whoAmI().catch(() => undefined);
  let opened: Promise<Response> | undefined;
  try {
    const servedAtOnce = await ha.settle();
    let who = servedAtOnce ? await firstWho : undefined;
    who ??= await whoAmI();
    if (!who) {
      early.abort();
      return;
    }
    router.start();
    // What happened before the page opened (the stream brings only what follows).
    void nodeEvents.seed();
    if (servedAtOnce) opened = firstStream;
    else early.abort();
  } catch (err) {
    early.abort();
    setConn("error", err instanceof Error ? err.message : String(err));
    return;
  }
  await follow(opened);
}

void main();
