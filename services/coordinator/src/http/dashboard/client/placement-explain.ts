/**
 * The Placement panel's Explain (ExplainPlacement for the chosen model),
 * kept true while it is on screen: the answer says when the coordinator gave
 * it ("as of 14:02:31") and is asked again when a snapshot arrives, at most
 * every `refreshMs`, while the Nodes page shows it — so a result never
 * describes a cluster that has moved on without saying how old it is.
 */
import { explainCounts, formatBytes } from "../view-model.js";
import { responseError } from "./console-context.js";
import { byId, el } from "./dom.js";

/** The least time between two automatic re-asks (a snapshot comes every 2 s, and after events). */
export const explainRefreshMs = 5_000;

interface ExplainAnswer {
  decision: string;
  nodeId: string;
  reason: string;
  /** The coordinator's wall clock when it answered (ISO). */
  at?: string;
  nodes: { nodeId: string; fits: boolean; reason: string; freeBytes: number; wouldEvict: string[] }[];
  /** Nodes weighed (the verdicts listed are the first page of them), and of those, fitting now and only after eviction. */
  nodesTotal: number;
  nodesFit: number;
  nodesFitAfterEviction: number;
}

export class PlacementExplain {
  /** The model whose answer is shown (or asked for); undefined before the first Explain. */
  private model: string | undefined;
  /** Bumped per ask: an answer shows only while its ask is the latest (a late one for another model is dropped). */
  private asked = 0;
  private inFlight = false;
  /** When (client clock) the last answer came: the next automatic ask waits `explainRefreshMs` from it. */
  private answeredAtMs = 0;

  constructor(
    private readonly headers: () => Record<string, string>,
    /** Whether the Nodes page is on screen (a hidden page's answer is not re-asked). */
    private readonly shown: () => boolean,
  ) {}

  /** The operator's Explain: asks now for `model`, which stays the one re-asked. */
  explain(model: string): void {
    this.model = model;
    void this.ask(model);
  }

  /** A new snapshot: re-asks for the shown model when it is due. */
  onSnapshot(): void {
    if (this.model === undefined || this.inFlight || !this.shown()) return;
    if (Date.now() - this.answeredAtMs < explainRefreshMs) return;
    void this.ask(this.model);
  }

  private async ask(model: string): Promise<void> {
    const seq = ++this.asked;
    this.inFlight = true;
    const out = byId("explain");
    try {
      const res = await fetch(`/api/dashboard/explain?model=${encodeURIComponent(model)}`, { headers: this.headers(), cache: "no-store" }).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
      if (seq !== this.asked) return;
      const at = new Date().toISOString();
      if (res instanceof Error || !res.ok) {
        const why = res instanceof Error ? res.message : await responseError(res);
        if (seq === this.asked) out.replaceChildren(el("span", { class: "drift-high" }, `${model}: ${why}`), this.stamp(at));
        return;
      }
      const r = (await res.json()) as ExplainAnswer;
      if (seq !== this.asked) return;
      const counts = explainCounts(r);
      const items = r.nodes.map((n) => el("li", {}, `${n.nodeId}: ${n.fits ? "fits" : "does not fit"} — ${n.reason} (free ${formatBytes(n.freeBytes)})${n.wouldEvict.length > 0 ? `; would evict ${n.wouldEvict.join(", ")}` : ""}`));
      out.replaceChildren(el("div", { "data-decision": r.decision, "data-model": model }, el("strong", {}, `${model}: ${r.decision}${r.nodeId === "" ? "" : ` → ${r.nodeId}`}`), ` — ${r.reason}`), ...(counts === "" ? [] : [el("p", { class: "explain-counts" }, counts)]), el("ul", {}, ...items), this.stamp(r.at ?? at));
    } finally {
      if (seq === this.asked) {
        this.inFlight = false;
        this.answeredAtMs = Date.now();
      }
    }
  }

  /** "as of 14:02:31": when the answer was given, and that it is re-asked. */
  private stamp(iso: string): HTMLElement {
    return el("p", { class: "explain-at", "data-at": iso }, `as of ${new Date(iso).toLocaleTimeString()} · asked again every ${String(explainRefreshMs / 1000)} s while shown`);
  }
}
