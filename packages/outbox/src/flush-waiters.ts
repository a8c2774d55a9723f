import { abortReason } from "@warden/common";

/** Callers of `Outbox.flushed`, woken together once the outbox holds nothing unsettled. */
export class FlushWaiters {
  private waiters: (() => void)[] = [];

  /**
   * Resolves when `wakeAll` runs (rejects with the signal's reason if it
   * aborts first). `notify` runs once the waiter is registered: the outbox
   * may be flushed already.
   */
  wait(signal: AbortSignal | undefined, notify: () => void): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted === true) {
        reject(abortReason(signal));
        return;
      }
      const done = (): void => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = (): void => {
        this.waiters = this.waiters.filter((w) => w !== done);
        if (signal !== undefined) reject(abortReason(signal));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(done);
      notify();
    });
  }

  wakeAll(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}
