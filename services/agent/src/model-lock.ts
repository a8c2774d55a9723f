import { Code, WardenError, abortReason } from "@warden/common";

/** A held lock; release is idempotent. */
export type Release = () => void;

type Mode = "shared" | "exclusive";

interface Waiter {
  mode: Mode;
  grant: () => void;
}

class RwLock {
  shared = 0;
  exclusive = false;
  readonly queue: Waiter[] = [];

  idle(): boolean {
    return this.shared === 0 && !this.exclusive && this.queue.length === 0;
  }

  /** Grants waiters strictly in arrival order (FIFO): a shared waiter behind an exclusive one waits. */
  pump(): void {
    for (;;) {
      const head = this.queue[0];
      if (head === undefined || this.exclusive) return;
      if (head.mode === "exclusive" && this.shared > 0) return;
      this.queue.shift();
      if (head.mode === "exclusive") this.exclusive = true;
      else this.shared++;
      head.grant();
    }
  }
}

/**
 * Per-model readers/writer locks: starts take the model's lock shared for their
 * whole duration, stops take it exclusive, waiters are served FIFO. A second
 * line of defence behind the coordinator's lifecycle lock (DESIGN §3.3).
 */
export class ModelLocks {
  private readonly locks = new Map<string, RwLock>();

  /**
   * Waits for the lock until `signal` aborts. A stop that cannot get it in time
   * fails with DEADLINE_EXCEEDED and the message the coordinator matches on:
   * `waiting to shut down model "<id>": context deadline exceeded`.
   */
  acquire(model: string, mode: Mode, signal: AbortSignal): Promise<Release> {
    let lock = this.locks.get(model);
    if (lock === undefined) {
      lock = new RwLock();
      this.locks.set(model, lock);
    }
    const l = lock;
    return new Promise<Release>((resolve, reject) => {
      let released = false;
      const release: Release = () => {
        if (released) return;
        released = true;
        if (mode === "exclusive") l.exclusive = false;
        else l.shared--;
        l.pump();
        if (l.idle()) this.locks.delete(model);
      };
      const onAbort = (): void => {
        const i = l.queue.indexOf(waiter);
        if (i >= 0) l.queue.splice(i, 1);
        l.pump();
        if (l.idle()) this.locks.delete(model);
        const reason = abortReason(signal);
        if (mode === "exclusive" && reason.code !== Code.Canceled) {
          reject(new WardenError(Code.DeadlineExceeded, `waiting to shut down model "${model}": context deadline exceeded`, { cause: reason }));
        } else if (mode === "exclusive") {
          reject(new WardenError(Code.Canceled, `waiting to shut down model "${model}": context canceled`, { cause: reason }));
        } else reject(reason);
      };
      const waiter: Waiter = {
        mode,
        grant: () => {
          signal.removeEventListener("abort", onAbort);
          resolve(release);
        },
      };
      if (signal.aborted) {
        onAbort();
        return;
      }
      signal.addEventListener("abort", onAbort, { once: true });
      l.queue.push(waiter);
      l.pump();
    });
  }

  /** Number of models with a held or awaited lock (for tests and metrics). */
  size(): number {
    return this.locks.size;
  }
}
