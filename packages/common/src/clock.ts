/** Cancels a timer; calling it twice is harmless. */
export type Cancel = () => void;

/**
 * The injected clock. Decision packages take one of these instead of touching
 * timers or `Date.now`, so tests and the seeded simulation control time.
 */
export interface Clock {
  /** Monotonic milliseconds; only differences are meaningful. */
  now(): number;
  /** Wall-clock milliseconds since the Unix epoch, for timestamps shown to people. */
  wallNow(): number;
  /** Runs `fn` once after `delayMs`; returns a cancel function. */
  setTimer(delayMs: number, fn: () => void): Cancel;
}

/** The production clock: `performance.now()` and `setTimeout`. */
export const systemClock: Clock = {
  now: () => performance.now(),
  wallNow: () => Date.now(),
  setTimer(delayMs, fn) {
    const t = setTimeout(fn, Math.max(0, delayMs));
    return () => {
      clearTimeout(t);
    };
  },
};

interface ManualTimer {
  readonly id: number;
  readonly atMs: number;
  readonly fn: () => void;
}

/**
 * A clock that only moves when told to. Timers fire in due-time order (ties in
 * creation order) during `advance`. Used by unit tests and the simulation.
 */
export class ManualClock implements Clock {
  private nowMs: number;
  private readonly wallOffsetMs: number;
  private nextId = 0;
  private timers: ManualTimer[] = [];

  constructor(startMs = 0, wallStartMs = 1_700_000_000_000) {
    this.nowMs = startMs;
    this.wallOffsetMs = wallStartMs - startMs;
  }

  now(): number {
    return this.nowMs;
  }

  wallNow(): number {
    return this.nowMs + this.wallOffsetMs;
  }

  setTimer(delayMs: number, fn: () => void): Cancel {
    const timer: ManualTimer = { id: this.nextId++, atMs: this.nowMs + Math.max(0, delayMs), fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((t) => t !== timer);
    };
  }

  /** Number of timers not yet fired. */
  pendingTimers(): number {
    return this.timers.length;
  }

  /** Due time of the earliest timer, or undefined. */
  nextTimerAtMs(): number | undefined {
    let min: number | undefined;
    for (const t of this.timers) if (min === undefined || t.atMs < min) min = t.atMs;
    return min;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way. */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError(`advance: ms must be >= 0, got ${String(ms)}`);
    const target = this.nowMs + ms;
    for (;;) {
      const due = this.popDue(target);
      if (due === undefined) break;
      this.nowMs = due.atMs;
      due.fn();
    }
    this.nowMs = target;
  }

  private popDue(limitMs: number): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const t of this.timers) {
      if (t.atMs > limitMs) continue;
      if (best === undefined || t.atMs < best.atMs || (t.atMs === best.atMs && t.id < best.id)) best = t;
    }
    if (best !== undefined) {
      const chosen = best;
      this.timers = this.timers.filter((t) => t !== chosen);
    }
    return best;
  }
}
