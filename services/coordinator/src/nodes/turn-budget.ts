import { macrotask } from "../admin/work-slicer.js";

export interface TurnBudgetOptions {
  /** How long the work sharing this budget may run in one turn of the event loop before the rest waits for the next. */
  readonly budgetMs: number;
  /** Monotonic milliseconds. */
  readonly nowMs: () => number;
  /** A later turn of the event loop (a macrotask): timers and I/O run before it. */
  readonly nextTurn?: () => Promise<void>;
}

/**
 * One budget of synchronous work per turn of the event loop, shared by many
 * independent callers (every node's heartbeat stream). Heartbeats that arrive
 * together are answered in one chain of microtasks, which nothing else —
 * timers, the ticks, health checks, other I/O — can interrupt: at thousands
 * of nodes such a chain ran for 60–130 ms. Each heartbeat asks `wait()` first:
 * undefined while this turn's budget lasts (no cost but a clock read), else a
 * promise of a later turn, so the chain is cut into turns of about `budgetMs`
 * with the rest of the event loop between them. Order within a stream is kept
 * (each stream awaits its own heartbeats in turn).
 */
export class TurnBudget {
  /** When this turn's work began; undefined before the first caller of a turn. */
  private turnStartMs: number | undefined;
  /** The pending wait, shared by every caller deferred to it. */
  private next: Promise<void> | undefined;
  /** Turns the budget was spent in (deferrals), for tests and metrics. */
  deferredTurns = 0;

  constructor(private readonly o: TurnBudgetOptions) {}

  /** Undefined: go on now. A promise: wait for a later turn (then call `wait()` again). */
  wait(): Promise<void> | undefined {
    const now = this.o.nowMs();
    if (this.turnStartMs === undefined) {
      this.startTurn(now);
      return undefined;
    }
    if (now - this.turnStartMs < this.o.budgetMs) return undefined;
    if (this.next === undefined) {
      this.deferredTurns++;
      this.next = (this.o.nextTurn ?? macrotask)().then(() => {
        this.next = undefined;
        this.turnStartMs = undefined;
      });
    }
    return this.next;
  }

  /** The first work of a turn: the budget runs from here, and a new turn (the next macrotask) starts afresh. */
  private startTurn(now: number): void {
    this.turnStartMs = now;
    void (this.o.nextTurn ?? macrotask)().then(() => {
      if (this.next === undefined) this.turnStartMs = undefined;
    });
  }
}
