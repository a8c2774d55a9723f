import { backoffDelayMs, type BackoffPolicy, type Cancel, type Clock, type Rng } from "@warden/common";

export interface FreedRetriesOptions {
  readonly clock: Clock;
  readonly rng: Rng;
  readonly backoff: BackoffPolicy;
  /** Fired when a retry is due; the caller stops the instance again. */
  readonly retry: (incarnation: string) => void;
}

/** A `freed` instance (Free succeeded, stop failed) is retried with the leftover backoff until stopped. */
export class FreedRetries {
  private readonly retries = new Map<string, { attempts: number; cancel: Cancel }>();

  constructor(private readonly o: FreedRetriesOptions) {}

  schedule(incarnation: string): void {
    const prev = this.retries.get(incarnation);
    const attempts = (prev?.attempts ?? 0) + 1;
    prev?.cancel();
    const delayMs = backoffDelayMs(this.o.backoff, attempts - 1, this.o.rng);
    const cancel = this.o.clock.setTimer(delayMs, () => {
      this.o.retry(incarnation);
    });
    this.retries.set(incarnation, { attempts, cancel });
  }

  cancel(incarnation: string): void {
    const r = this.retries.get(incarnation);
    if (r !== undefined) {
      r.cancel();
      this.retries.delete(incarnation);
    }
  }

  /** Cancels every pending retry. */
  close(): void {
    for (const r of this.retries.values()) r.cancel();
    this.retries.clear();
  }
}
