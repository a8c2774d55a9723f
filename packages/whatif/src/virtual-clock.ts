import type { Cancel, Clock } from "@warden/common";
import type { EventQueue } from "./event-queue.js";

/**
 * The `Clock` every simulated component and the real decision code share:
 * `now()` is virtual monotonic time, timers are entries in the event queue.
 * `wallNow()` adds an offset a fault can jump by ±1 h (wall time never
 * drives a decision; reliability.md invariant 14).
 */
export class VirtualClock implements Clock {
  private nowMs = 0;
  private wallOffsetMs = 1_750_000_000_000;

  constructor(private readonly queue: EventQueue) {}

  now(): number {
    return this.nowMs;
  }

  wallNow(): number {
    return this.nowMs + this.wallOffsetMs;
  }

  setTimer(delayMs: number, fn: () => void): Cancel {
    if (Number.isNaN(delayMs)) throw new RangeError("setTimer: delayMs is NaN");
    if (delayMs === Number.POSITIVE_INFINITY) return () => {};
    return this.queue.push(this.nowMs + Math.max(0, delayMs), "timer", fn);
  }

  /** Moves virtual time to `atMs` (never backwards): the run loop's, nobody else's. */
  advanceTo(atMs: number): void {
    if (atMs > this.nowMs) this.nowMs = atMs;
  }

  /** A wall-clock jump (fault F15). */
  jumpWall(deltaMs: number): void {
    this.wallOffsetMs += deltaMs;
  }
}
