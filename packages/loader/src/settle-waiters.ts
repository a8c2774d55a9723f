import { raceSignal } from "@warden/common";

interface Waiter {
  readonly promise: Promise<void>;
  readonly resolve: () => void;
}

/**
 * Callers waiting for a stop of one incarnation to settle (a model pending
 * eviction or freed, DESIGN §3.4 item 9). One shared promise per incarnation;
 * a waiter's own signal only ends its own wait.
 */
export class SettleWaiters {
  private readonly waiters = new Map<string, Waiter>();

  wait(incarnation: string, signal: AbortSignal): Promise<void> {
    let w = this.waiters.get(incarnation);
    if (w === undefined) {
      let resolve: () => void = () => {};
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      w = { promise, resolve };
      this.waiters.set(incarnation, w);
    }
    return raceSignal(w.promise, signal);
  }

  wake(incarnation: string): void {
    const w = this.waiters.get(incarnation);
    if (w !== undefined) {
      this.waiters.delete(incarnation);
      w.resolve();
    }
  }
}
