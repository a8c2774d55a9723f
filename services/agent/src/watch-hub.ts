import { isAborted } from "./is-aborted.js";
import { Code, WardenError, abortReason } from "@warden/common";

/**
 * Fans events out to any number of watchers. Each watcher has a bounded queue;
 * a watcher that falls behind by more than `maxQueued` is ended with
 * RESOURCE_EXHAUSTED (it missed events and must resync from ListBackends)
 * instead of growing memory without bound.
 */
export class WatchHub<E> {
  private readonly watchers = new Set<(ev: E) => void>();

  constructor(private readonly maxQueued = 1024) {}

  publish(ev: E): void {
    for (const w of [...this.watchers]) w(ev);
  }

  watcherCount(): number {
    return this.watchers.size;
  }

  /** Events published from now on, until `signal` aborts (then it returns quietly). */
  async *subscribe(signal: AbortSignal): AsyncGenerator<E> {
    const queue: E[] = [];
    const st = { overflow: false };
    let wake: (() => void) | undefined;
    const push = (ev: E): void => {
      if (queue.length >= this.maxQueued) st.overflow = true;
      else queue.push(ev);
      wake?.();
    };
    const onAbort = (): void => wake?.();
    this.watchers.add(push);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      for (;;) {
        while (queue.length > 0) yield queue.shift() as E;
        if (st.overflow) throw new WardenError(Code.ResourceExhausted, `watcher fell behind by more than ${String(this.maxQueued)} events; resync with ListBackends`);
        if (isAborted(signal)) {
          const r = abortReason(signal);
          if (r.code === Code.Canceled) return;
          throw r;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    } finally {
      this.watchers.delete(push);
      signal.removeEventListener("abort", onAbort);
    }
  }
}
