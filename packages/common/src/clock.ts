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
  /**
   * Runs `fn` once after `delayMs`; returns a cancel function. Any finite
   * delay works, including ones above 2^31-1 ms; `Infinity` never fires and
   * NaN throws RangeError.
   */
  setTimer(delayMs: number, fn: () => void): Cancel;
}

/**
 * The longest delay `setTimeout` honours: 2^31-1 ms (about 24.8 days). Node
 * fires a longer one after 1 ms (TimeoutOverflowWarning), so a 2^31 ms stop
 * timeout would expire at once; {@link armTimer} re-arms in chunks instead.
 */
export const maxTimerChunkMs = 2_147_483_647;

/** What {@link armTimer} needs from the host: a monotonic clock and one-shot timers. */
export interface TimerHost {
  now(): number;
  setTimeout(fn: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * Shared by both clocks so they agree on odd delays: negative counts as 0,
 * `Infinity` never fires, NaN is a caller bug (RangeError) rather than a timer
 * that fires at once.
 */
function checkDelayMs(delayMs: number): number {
  if (Number.isNaN(delayMs)) throw new RangeError("setTimer: delayMs is NaN");
  return Math.max(0, delayMs);
}

const noop: Cancel = () => {};

/**
 * Runs `fn` once after `delayMs` on `host`. A delay above
 * {@link maxTimerChunkMs} is armed as a chunk of that size and re-armed with
 * what is left when the chunk ends, until the due time (measured on
 * `host.now()`) is reached; a delay within one chunk is a single timer.
 */
export function armTimer(host: TimerHost, delayMs: number, fn: () => void): Cancel {
  const d = checkDelayMs(delayMs);
  if (d === Number.POSITIVE_INFINITY) return noop;
  const dueAtMs = host.now() + d;
  let handle: unknown;
  let cancelled = false;
  const arm = (remainingMs: number): void => {
    const chunked = remainingMs > maxTimerChunkMs;
    handle = host.setTimeout(
      () => {
        if (cancelled) return;
        // Only a chunk re-checks the time: a plain timer fires when it fires,
        // so sub-millisecond skew between the host's clocks never re-arms it.
        const left = dueAtMs - host.now();
        if (chunked && left > 0) arm(left);
        else fn();
      },
      chunked ? maxTimerChunkMs : remainingMs,
    );
  };
  arm(d);
  return () => {
    cancelled = true;
    host.clearTimeout(handle);
  };
}

const nodeTimers: TimerHost = {
  now: () => performance.now(),
  setTimeout: (fn, delayMs) => setTimeout(fn, delayMs),
  clearTimeout: (handle) => {
    clearTimeout(handle as ReturnType<typeof setTimeout>);
  },
};

const unrefNodeTimers: TimerHost = {
  ...nodeTimers,
  setTimeout: (fn, delayMs) => setTimeout(fn, delayMs).unref(),
};

/**
 * A real timer for a deadline that came from outside (a gRPC deadline, a
 * caller's timeout): re-armed past setTimeout's 2^31-1 ms, where a bare
 * setTimeout would fire at once. `unref`: it does not keep the process alive.
 */
export function deadlineTimer(delayMs: number, fn: () => void, options: { readonly unref?: boolean } = {}): Cancel {
  return armTimer(options.unref === true ? unrefNodeTimers : nodeTimers, Math.max(0, delayMs), fn);
}

/** The production clock: `performance.now()` and `setTimeout`, re-armed past 2^31-1 ms. */
export const systemClock: Clock = {
  now: () => performance.now(),
  wallNow: () => Date.now(),
  setTimer(delayMs, fn) {
    return armTimer(nodeTimers, delayMs, fn);
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
    const d = checkDelayMs(delayMs);
    if (d === Number.POSITIVE_INFINITY) return noop;
    const timer: ManualTimer = { id: this.nextId++, atMs: this.nowMs + d, fn };
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
