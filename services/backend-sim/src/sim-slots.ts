import { abortReason } from "@warden/common";

/** Gives a slot back. Idempotent. */
export type SlotRelease = () => void;

/**
 * How many predictions backend-sim serves at once (knob `parallel`, like
 * llama.cpp's `--parallel` slots or LocalAI's `parallel_requests`): calls past
 * the limit wait, first come first served, so one process's throughput is
 * capped as a GPU's is. The limit is read at every take and release (LoadModel
 * options may change it); 0 = unlimited. A waiting call whose signal aborts
 * leaves the queue without taking a slot.
 */
export class SimSlots {
  private busy = 0;
  /** Waiters in arrival order (Sets iterate in insertion order). */
  private readonly waiting = new Set<(release: SlotRelease) => void>();

  constructor(private readonly limit: () => number) {}

  /** Calls holding a slot. */
  get inUse(): number {
    return this.busy;
  }

  /** Calls waiting for a slot. */
  get queued(): number {
    return this.waiting.size;
  }

  async take(signal: AbortSignal): Promise<SlotRelease> {
    if (signal.aborted) throw abortReason(signal);
    if (this.waiting.size === 0 && this.free()) return this.grant();
    return new Promise<SlotRelease>((resolve, reject) => {
      const onAbort = (): void => {
        this.waiting.delete(wake);
        reject(abortReason(signal));
      };
      const wake = (release: SlotRelease): void => {
        signal.removeEventListener("abort", onAbort);
        resolve(release);
      };
      this.waiting.add(wake);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  private free(): boolean {
    const n = this.limit();
    return n === 0 || this.busy < n;
  }

  /** Counts the slot now, synchronously: a slot handed to a waiter cannot be taken by a newcomer meanwhile. */
  private grant(): SlotRelease {
    this.busy++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.busy--;
      this.wakeNext();
    };
  }

  private wakeNext(): void {
    while (this.waiting.size > 0 && this.free()) {
      const [next] = this.waiting;
      if (next === undefined) return;
      this.waiting.delete(next);
      next(this.grant());
    }
  }
}
