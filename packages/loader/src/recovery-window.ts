import { isPlanted } from "@warden/common";

/**
 * When admission opens after a start or a takeover. Without a journal that
 * names nodes it is a fixed wait (`upperBoundMs`, the `recoveryWindow`
 * setting), as it always was: inventories of agents the journal does not
 * know may still arrive. With nodes named (instances the journal last saw
 * alive, open stop intents), it opens as soon as each of them has settled —
 * reported its first inventory (reconciled: adopted, or known not to run) or
 * been declared lost — or its own deadline passed, whichever comes first per
 * node. Pure: the caller feeds the clock's time and arms the one timer
 * `nextDeadlineMs` names.
 */
export type RecoveryWindowState =
  | { readonly t: "waiting"; readonly pending: ReadonlyMap<string, number>; readonly fixedUntilMs: number | undefined }
  | { readonly t: "open"; readonly cause: RecoveryOpenCause; readonly atMs: number };

/** Why the window opened: every named node settled, a deadline passed (some never reported), or no window at all. */
export type RecoveryOpenCause = "all-reported" | "deadline" | "no-window";

export type NodeSettlement = "reported" | "lost";

export class RecoveryWindow {
  private st: RecoveryWindowState;
  /** Nodes whose deadline passed before they settled (for the log). */
  private readonly late: string[] = [];

  /**
   * `nodes`: the journal's nodes, each with its own deadline (clock ms).
   * None named: open at `nowMs + upperBoundMs` (at once when it is 0).
   */
  constructor(nodes: ReadonlyMap<string, number>, nowMs: number, upperBoundMs: number) {
    if (upperBoundMs <= 0) this.st = { t: "open", cause: "no-window", atMs: nowMs };
    // Planted bug "fixed-recovery-window": the journal's nodes are not waited for, only the fixed timer.
    else if (nodes.size === 0 || isPlanted("fixed-recovery-window")) this.st = { t: "waiting", pending: new Map(), fixedUntilMs: nowMs + upperBoundMs };
    else this.st = { t: "waiting", pending: new Map(nodes), fixedUntilMs: undefined };
  }

  get state(): RecoveryWindowState {
    return this.st;
  }

  get open(): boolean {
    return this.st.t === "open";
  }

  /** Nodes still awaited. */
  pending(): string[] {
    return this.st.t === "waiting" ? [...this.st.pending.keys()] : [];
  }

  /** Nodes given up on at their deadline. */
  lateNodes(): readonly string[] {
    return this.late;
  }

  /** When the caller must call `expire` next; undefined when open. */
  nextDeadlineMs(): number | undefined {
    if (this.st.t === "open") return undefined;
    if (this.st.fixedUntilMs !== undefined) return this.st.fixedUntilMs;
    let next: number | undefined;
    for (const d of this.st.pending.values()) if (next === undefined || d < next) next = d;
    return next;
  }

  /** A node reported or was lost. True when this opened the window. */
  settle(nodeId: string, nowMs: number): boolean {
    if (this.st.t !== "waiting" || !this.st.pending.has(nodeId)) return false;
    const pending = new Map(this.st.pending);
    pending.delete(nodeId);
    return this.next(pending, nowMs, "all-reported");
  }

  /** The clock reached `nowMs`: nodes past their deadline are given up on. True when this opened the window. */
  expire(nowMs: number): boolean {
    if (this.st.t !== "waiting") return false;
    if (this.st.fixedUntilMs !== undefined) {
      if (nowMs < this.st.fixedUntilMs) return false;
      this.st = { t: "open", cause: "deadline", atMs: nowMs };
      return true;
    }
    const pending = new Map<string, number>();
    for (const [nodeId, d] of this.st.pending) {
      if (d <= nowMs) this.late.push(nodeId);
      else pending.set(nodeId, d);
    }
    if (pending.size === this.st.pending.size) return false;
    return this.next(pending, nowMs, "deadline");
  }

  /** The one transition point. */
  private next(pending: Map<string, number>, nowMs: number, cause: RecoveryOpenCause): boolean {
    if (pending.size > 0) {
      this.st = { t: "waiting", pending, fixedUntilMs: undefined };
      return false;
    }
    this.st = { t: "open", cause: this.late.length > 0 ? "deadline" : cause, atMs: nowMs };
    return true;
  }
}
