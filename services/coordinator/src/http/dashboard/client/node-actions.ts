/**
 * The Nodes page's buttons (Placement's Load and Unload, a row's Unload, a
 * card's Drain and Undrain): each press calls its dashboard action and says
 * in #action-result what runs, then its answer, in words (node-action-text.ts).
 * Each answer is tied to its press: a late answer never replaces a newer one's.
 */
import { doneText, failedText, pendingText, type NodeAction, type NodeActionAnswer } from "../node-action-text.js";
import { lastLoadStderr, responseError, type ConsoleContext } from "./console-context.js";
import { byId } from "./dom.js";

/** Between two reads of a running load's placement (what it waits for). */
const loadWatchMs = 1_500;

export class NodeActions {
  /** Bumped by each press: a result shows only while its press is the latest. */
  private pressed = 0;

  constructor(private readonly ctx: ConsoleContext) {}

  async press(a: NodeAction): Promise<void> {
    const seq = ++this.pressed;
    this.show(pendingText(a), false, seq);
    const stopWatch = a.t === "load" ? this.watchLoad(a.model, seq) : (): void => undefined;
    let res: Response;
    try {
      const { t, ...body } = a;
      res = await fetch(`/api/dashboard/actions/${t}`, { method: "POST", headers: this.ctx.headers(true), body: JSON.stringify(body) });
    } catch (err) {
      this.show(failedText(a, err instanceof Error ? err.message : String(err), false), true, seq);
      return;
    } finally {
      stopWatch();
    }
    if (!res.ok) {
      const why = await responseError(res);
      this.show(failedText(a, why), true, seq);
      const stderr = a.t === "load" ? await lastLoadStderr(this.ctx, a.model) : "";
      if (stderr !== "") this.show(`${failedText(a, why)}; the backend's last stderr line: ${stderr}`, true, seq);
      return;
    }
    this.show(doneText(a, (await res.json()) as NodeActionAnswer), false, seq);
  }

  private show(text: string, error: boolean, seq: number): void {
    if (seq !== this.pressed) return;
    const r = byId("action-result");
    r.textContent = text;
    r.className = error ? "action-result error" : "action-result";
  }

  /** While a load runs: says in words whether it waits for a node (and why) or loads; returns the stop. */
  private watchLoad(model: string, seq: number): () => void {
    // Read through a function: the stop flips it while the loop awaits.
    const w = { done: false };
    const stopped = (): boolean => w.done;
    const poll = async (): Promise<void> => {
      while (!stopped()) {
        await new Promise((r) => setTimeout(r, loadWatchMs));
        const res = await fetch(`/api/dashboard/explain?model=${encodeURIComponent(model)}`, { headers: this.ctx.headers(), cache: "no-store" }).catch(() => undefined);
        if (stopped() || res?.ok !== true) continue;
        const r = (await res.json()) as { decision: string; reason: string };
        if (!stopped()) this.show(r.decision === "wait" ? `loading ${model} — waiting for a node: ${r.reason}` : `loading ${model}…`, false, seq);
      }
    };
    void poll();
    return () => {
      w.done = true;
    };
  }
}
