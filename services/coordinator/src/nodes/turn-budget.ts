import { macrotask } from "../admin/work-slicer.js";

export interface TurnBudgetOptions {
  /** How much of the shared work may run in one turn of the event loop before the rest waits for the next. */
  readonly budgetMs: number;
  /** Monotonic milliseconds. */
  readonly nowMs: () => number;
  /** A later turn of the event loop (a macrotask): timers and I/O run before it. */
  readonly nextTurn?: () => Promise<void>;
}

/** Waiters served before the consumed head of the queue is cut off (the array is not shifted one by one). */
const compactAfter = 1024;

/**
 * One budget of synchronous work per turn of the event loop, shared by many
 * independent callers (every node's heartbeat stream). Heartbeats that arrive
 * together are answered in one chain of microtasks, which nothing else —
 * timers, the ticks, health checks, other I/O — can interrupt: at thousands
 * of nodes such a chain ran for 60–130 ms. Each heartbeat asks `has()` first:
 * true while this turn's budget lasts (no cost but a comparison); else it
 * hands `defer()` what resumes it; then it runs through `run()`, which charges
 * the time it took to the turn. So the work is cut into turns of about
 * `budgetMs` with the rest of the event loop between them. Only the work run
 * through `run()` is charged — not the reading and writing of the streams,
 * which happens between the heartbeats whatever the budget says: charging
 * that too (the time since the turn's first heartbeat) left heartbeats
 * waiting while the loop was half idle (a heartbeat p99 of 0.74 s at 5 000
 * nodes and half a core, 0.06 s without).
 *
 * The deferred wait in one queue, first in first out, and a later turn resumes
 * only as many of them as its budget lets run: the rest stay queued untouched.
 * Each used to await one promise shared by everything deferred, so every turn
 * woke every waiter — at 10 000 nodes hundreds a turn, each to find the budget
 * spent again and wait anew — work in proportion to the backlog, not to what a
 * turn answers. Order within a stream is kept (each stream defers its own
 * heartbeats in turn).
 */
export class TurnBudget {
  /** Work charged to this turn so far; undefined while no turn is open. */
  private spentMs: number | undefined;
  /** A macrotask is pending: it closes the open turn (and opens the next for the waiters). */
  private scheduled = false;
  /** Deferred callers in order; those before `head` were resumed. */
  private readonly waiters: (() => void)[] = [];
  private head = 0;
  /** Turns the budget was spent in (deferrals), for tests and metrics. */
  deferredTurns = 0;
  /** Deferred callers resumed so far, for tests: one per `defer()`, whatever the backlog. */
  resumed = 0;

  constructor(private readonly o: TurnBudgetOptions) {}

  /** True: go on now (the first caller of a turn opens it). False: hand `defer()` what resumes you. */
  has(): boolean {
    if (this.spentMs === undefined) {
      this.openTurn();
      return true;
    }
    return this.spentMs < this.o.budgetMs;
  }

  /**
   * Calls `resume` in a later turn, after everything deferred before it, once that
   * turn's budget lets it (it then asks `has()` again). `resume` must not throw.
   */
  defer(resume: () => void): void {
    if (this.waiters.length === this.head) this.deferredTurns++;
    this.waiters.push(resume);
    this.schedule();
  }

  /** Runs one unit of the shared work (after `has()` let it), charging its time to this turn. */
  run<T>(work: () => T): T {
    const startMs = this.o.nowMs();
    try {
      return work();
    } finally {
      if (this.spentMs !== undefined) this.spentMs += this.o.nowMs() - startMs;
    }
  }

  /** Deferred callers not yet resumed. */
  get waiting(): number {
    return this.waiters.length - this.head;
  }

  /** The first work of a turn: the budget runs from here until the next macrotask. */
  private openTurn(): void {
    this.spentMs = 0;
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    void (this.o.nextTurn ?? macrotask)().then(this.turnEnds);
  }

  /** The open turn ends; a new one resumes the waiters in order while its budget lasts. */
  private readonly turnEnds = (): void => {
    this.scheduled = false;
    this.spentMs = undefined;
    if (this.waiting === 0) return;
    // Opening the turn also schedules the next, before anything is resumed.
    this.openTurn();
    // Resumed callers that run out of budget defer again, behind the rest.
    while (this.waiting > 0 && this.has()) {
      const resume = this.waiters[this.head] ?? noop;
      this.waiters[this.head] = noop;
      this.head++;
      this.resumed++;
      resume();
    }
    if (this.waiting === 0) {
      this.waiters.length = 0;
      this.head = 0;
    } else if (this.head >= compactAfter && this.head * 2 >= this.waiters.length) {
      this.waiters.splice(0, this.head);
      this.head = 0;
    }
    if (this.waiting > 0) this.deferredTurns++;
  };
}

function noop(): void {
  // A resumed waiter's slot, until the queue is compacted.
}
