import { abortReason } from "@warden/common";

/** Releases a held lock; calling it twice is harmless. */
export type Release = () => void;

type Mode = "shared" | "exclusive";

interface Waiter {
  readonly mode: Mode;
  readonly grant: () => void;
}

interface Entry {
  shared: number;
  exclusive: boolean;
  readonly queue: Waiter[];
}

/**
 * Per-key reader/writer locks (the loader's lifecycle lock, DESIGN §3.3).
 *
 * - shared: a load holds it for its whole duration; a routing lookup holds it
 *   only for the lookup (calls are counted by the watchdog, never on the lock);
 * - exclusive: a stop;
 * - FIFO: a queued exclusive waiter blocks shared requests that arrive after
 *   it, so a stop is never starved by a stream of loads or lookups;
 * - entries are reference counted and removed when the last holder or waiter
 *   leaves (including a waiter that gives up), so the table cannot grow from
 *   keys nobody holds.
 */
export class LockTable {
  private readonly entries = new Map<string, Entry>();

  /** Number of keys with holders or waiters (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }

  /** True when a holder of either mode has `key`. */
  isHeld(key: string): boolean {
    const e = this.entries.get(key);
    return e !== undefined && (e.shared > 0 || e.exclusive);
  }

  /** True when a shared holder (a load in progress) has `key`. */
  isSharedHeld(key: string): boolean {
    return (this.entries.get(key)?.shared ?? 0) > 0;
  }

  /**
   * True when `key` could be taken shared at once (nothing holds it
   * exclusively or waits for it): what a lookup that begins and ends in one
   * turn needs, since nothing can take or queue for the key before that turn
   * ends — without making and removing an entry for it on every routed call.
   */
  sharedFree(key: string): boolean {
    const e = this.entries.get(key);
    return e === undefined || (e.queue.length === 0 && this.canGrant(e, "shared"));
  }

  shared(key: string, signal?: AbortSignal): Promise<Release> {
    return this.acquire(key, "shared", signal);
  }

  /**
   * Takes `key` shared at once when nothing holds or waits for it
   * exclusively, without yielding (so a routing lookup and the request
   * tracking after it happen in one turn); undefined otherwise.
   */
  tryShared(key: string): Release | undefined {
    const e = this.entries.get(key);
    if (e !== undefined && (e.queue.length > 0 || !this.canGrant(e, "shared"))) return undefined;
    const entry = this.entry(key);
    this.take(entry, "shared");
    return this.releaser(key, entry, "shared");
  }

  exclusive(key: string, signal?: AbortSignal): Promise<Release> {
    return this.acquire(key, "exclusive", signal);
  }

  private entry(key: string): Entry {
    let e = this.entries.get(key);
    if (e === undefined) {
      e = { shared: 0, exclusive: false, queue: [] };
      this.entries.set(key, e);
    }
    return e;
  }

  private canGrant(e: Entry, mode: Mode): boolean {
    if (e.exclusive) return false;
    return mode === "shared" ? true : e.shared === 0;
  }

  private acquire(key: string, mode: Mode, signal: AbortSignal | undefined): Promise<Release> {
    if (signal?.aborted === true) return Promise.reject(abortReason(signal));
    const e = this.entry(key);
    if (e.queue.length === 0 && this.canGrant(e, mode)) {
      this.take(e, mode);
      return Promise.resolve(this.releaser(key, e, mode));
    }
    return new Promise<Release>((resolve, reject) => {
      const waiter: Waiter = {
        mode,
        grant: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve(this.releaser(key, e, mode));
        },
      };
      const onAbort = (): void => {
        const i = e.queue.indexOf(waiter);
        if (i >= 0) e.queue.splice(i, 1);
        // A departing waiter may have been blocking others behind it.
        this.pump(key, e);
        if (signal !== undefined) reject(abortReason(signal));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      e.queue.push(waiter);
    });
  }

  private take(e: Entry, mode: Mode): void {
    if (mode === "shared") e.shared++;
    else e.exclusive = true;
  }

  private releaser(key: string, e: Entry, mode: Mode): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (mode === "shared") e.shared--;
      else e.exclusive = false;
      this.pump(key, e);
    };
  }

  /** Grants waiters at the head of the queue, in order, as far as compatible. */
  private pump(key: string, e: Entry): void {
    for (;;) {
      const head = e.queue[0];
      if (head === undefined || !this.canGrant(e, head.mode)) break;
      e.queue.shift();
      this.take(e, head.mode);
      head.grant();
    }
    if (e.queue.length === 0 && e.shared === 0 && !e.exclusive) this.entries.delete(key);
  }
}
