import { abortReason } from "@warden/common";

interface Flight<T, P> {
  readonly ctl: AbortController;
  readonly result: Promise<T>;
  waiters: number;
  last: P | undefined;
  readonly listeners: Set<(p: P) => void>;
}

/**
 * One run of `work` per key however many callers wait on it. Each caller
 * brings its own AbortSignal: an aborted caller stops waiting at once (its
 * promise rejects with its signal's reason) and leaves; the work itself is
 * aborted only when no caller is left. Progress the work reports reaches
 * every caller (a late one gets the last report first). A finished run is
 * forgotten: the next call for the key starts a new one. No I/O and no
 * timers here: the bookkeeping is tested alone (single-flight.test.ts).
 */
export class SingleFlight<T, P> {
  private readonly flights = new Map<string, Flight<T, P>>();
  /** Per key, when its latest run has settled (success or not). */
  private readonly tails = new Map<string, Promise<void>>();

  /** Keys with a run in progress (an abandoned one until it settled). */
  size(): number {
    return this.flights.size;
  }

  /** Waiters of the key's run (0 = none in progress). */
  waiters(key: string): number {
    return this.flights.get(key)?.waiters ?? 0;
  }

  run(key: string, signal: AbortSignal, work: (signal: AbortSignal, report: (p: P) => void) => Promise<T>, onProgress?: (p: P) => void): Promise<T> {
    if (signal.aborted) return Promise.reject(abortReason(signal));
    let f = this.flights.get(key);
    if (f?.ctl.signal.aborted === true) f = undefined; // being abandoned: a new run starts after it settled
    if (f === undefined) {
      // A run abandoned by its last waiter may still be cleaning up (its partial
      // file): the next run for the key starts only once it has settled, so two
      // runs never touch one key's files at once.
      const before = this.tails.get(key) ?? Promise.resolve();
      const ctl = new AbortController();
      const listeners = new Set<(p: P) => void>();
      const created: Flight<T, P> = {
        ctl,
        listeners,
        waiters: 0,
        last: undefined,
        result: before.then(() =>
          work(ctl.signal, (p) => {
            created.last = p;
            for (const l of [...listeners]) l(p);
          }),
        ),
      };
      f = created;
      this.flights.set(key, f);
      const settled = created.result.then(
        () => undefined,
        () => undefined,
      );
      this.tails.set(key, settled);
      void settled.then(() => {
        if (this.flights.get(key) === created) this.flights.delete(key);
        if (this.tails.get(key) === settled) this.tails.delete(key);
      });
    }
    const flight = f;
    flight.waiters++;
    if (onProgress !== undefined) {
      flight.listeners.add(onProgress);
      if (flight.last !== undefined) onProgress(flight.last);
    }
    return new Promise<T>((resolve, reject) => {
      let left = false;
      const leave = (): void => {
        if (left) return;
        left = true;
        signal.removeEventListener("abort", onAbort);
        if (onProgress !== undefined) flight.listeners.delete(onProgress);
        flight.waiters--;
      };
      const onAbort = (): void => {
        leave();
        // The last one out turns off the light: nobody is left to use the bytes.
        if (flight.waiters === 0) flight.ctl.abort(abortReason(signal));
        reject(abortReason(signal));
      };
      signal.addEventListener("abort", onAbort, { once: true });
      flight.result.then(
        (v) => {
          if (left) return;
          leave();
          resolve(v);
        },
        (err: unknown) => {
          if (left) return;
          leave();
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }
}
