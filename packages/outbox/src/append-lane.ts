import type { Event } from "@warden/proto";
import { WardenError, backoffDelayMs, isStaleLeaderEpoch, type BackoffPolicy, type Cancel, type Clock, type Rng } from "@warden/common";
import type { Journal } from "./journal-port.js";

export interface AppendLaneOptions {
  readonly journal: Journal;
  readonly clock: Clock;
  readonly rng: Rng;
  readonly backoff: BackoffPolicy;
  /** Aborted when the outbox closes: the lane stops (what waits is re-emitted by nobody; see `size`). */
  readonly closed: AbortSignal;
  /** The event is journaled now, in its turn: it may be published. */
  readonly onJournaled: (event: Event) => void;
  /** Every failed attempt and the end of the episode (`undefined`), for health. */
  readonly onError: (message: string | undefined) => void;
  /** The journal refused as from a superseded leader: `dropped` events waited and will never be journaled by this writer. */
  readonly onSuperseded?: (dropped: number, err: unknown) => void;
}

/**
 * Events the journal refused, journaled again in their order once it takes
 * writes again (a replicated journal refuses while its stream elects a new
 * leader; a disk may be full for a while). Before, such an event was lost: an
 * eviction.started refused during a JetStream election left its
 * eviction.stopped alone on the audit stream. While the lane holds anything,
 * newer events queue behind it, so the journal keeps their emit order. One
 * owner: the outbox; one attempt at a time. A refusal because a newer
 * leader wrote (`isStaleLeaderEpoch`) is terminal: retrying cannot change it,
 * and what waits here is an ex-leader's word, so it is dropped, never retried.
 */
export class AppendLane {
  private readonly waiting: Event[] = [];
  private failures = 0;
  private timer: Cancel | undefined;
  private running = false;
  private superseded = false;

  constructor(private readonly o: AppendLaneOptions) {}

  /** Events waiting to be journaled (they count toward the outbox's depth). */
  get size(): number {
    return this.waiting.length;
  }

  /** Queues `event` behind what waits; `failure` is the journal's refusal when this event met it first. */
  push(event: Event, failure?: unknown): void {
    if (this.isClosed() || this.superseded) return;
    this.waiting.push(event);
    if (failure !== undefined) this.failed(failure);
    else if (!this.running && this.timer === undefined) this.schedule(0);
  }

  private failed(err: unknown): void {
    this.failures++;
    this.o.onError(WardenError.from(err).rawMessage);
    if (!this.running && this.timer === undefined) this.schedule(backoffDelayMs(this.o.backoff, this.failures - 1, this.o.rng));
  }

  private schedule(delayMs: number): void {
    this.timer = this.o.clock.setTimer(delayMs, () => {
      this.timer = undefined;
      void this.run();
    });
  }

  /** A method, not a field read: the signal flips during the awaits below. */
  private isClosed(): boolean {
    return this.o.closed.aborted;
  }

  private async run(): Promise<void> {
    if (this.running || this.isClosed()) return;
    this.running = true;
    try {
      for (let head = this.waiting[0]; head !== undefined && !this.isClosed(); head = this.waiting[0]) {
        try {
          await this.o.journal.append({ kind: "event", event: head }, this.o.closed);
        } catch (err) {
          if (this.isClosed()) return;
          if (isStaleLeaderEpoch(err)) {
            this.supersede(err);
            return;
          }
          this.running = false;
          this.failed(err);
          return;
        }
        this.waiting.shift();
        this.failures = 0;
        this.o.onJournaled(head);
      }
      if (this.waiting.length === 0) this.o.onError(undefined);
    } finally {
      this.running = false;
    }
  }

  /** Terminal: what waits is dropped and nothing is journaled from here on. */
  supersede(err: unknown): void {
    if (this.superseded) return;
    this.superseded = true;
    const dropped = this.waiting.length;
    this.waiting.length = 0;
    this.close();
    this.o.onSuperseded?.(dropped, err);
    this.o.onError(undefined);
  }

  /** Stops retrying (the outbox closed); what still waits is reported by `size`. */
  close(): void {
    this.timer?.();
    this.timer = undefined;
  }
}
