import { throwIfAborted } from "@warden/common";

export interface WorkSlicerOptions {
  /** The caller's signal (deadline or cancel): work stops at the next step once it aborts. */
  readonly signal?: AbortSignal;
  /** How long one slice of synchronous work may run before it yields to the event loop. */
  readonly sliceMs: number;
  /** Monotonic milliseconds. */
  readonly nowMs: () => number;
  /** Lets the event loop run (timers, I/O: heartbeats) before the next slice; a macrotask, not a microtask. */
  readonly yieldNow?: () => Promise<void>;
}

/** A macrotask: a resolved promise would run before any I/O callback and let nothing else in. */
export function macrotask(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Cuts a long synchronous computation into slices: between units of work the
 * caller awaits `step()`, which throws the signal's reason (a WardenError)
 * once it aborted and yields to the event loop once a slice has run its
 * `sliceMs`, so a large admin call neither outlives its caller nor starves
 * heartbeats.
 */
export class WorkSlicer {
  private sliceStartMs: number;
  /** Slices handed back to the event loop so far. */
  yields = 0;

  constructor(private readonly o: WorkSlicerOptions) {
    this.sliceStartMs = o.nowMs();
  }

  /** Throws the signal's reason once it aborted; true once this slice has run its `sliceMs` (then `pause`). */
  due(): boolean {
    throwIfAborted(this.o.signal);
    return this.o.nowMs() - this.sliceStartMs >= this.o.sliceMs;
  }

  /** Yields to the event loop, then starts a new slice; throws the signal's reason if it aborted meanwhile. */
  async pause(): Promise<void> {
    this.yields++;
    await (this.o.yieldNow ?? macrotask)();
    throwIfAborted(this.o.signal);
    this.sliceStartMs = this.o.nowMs();
  }

  /** `due`, then `pause` when it is. */
  async step(): Promise<void> {
    if (this.due()) await this.pause();
  }
}
