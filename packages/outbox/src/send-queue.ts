import type { Event } from "@warden/proto";
import { EntryQueue } from "./entry-queue.js";
import type { EventPriority } from "./event-priority.js";

export interface OutboxEntry {
  readonly seq: number;
  readonly event: Event;
  readonly priority: EventPriority;
}

/**
 * The outbox's events to send, one FIFO per priority (sent in `seq` order
 * across both, so the split only decides what a full outbox gives up), plus a
 * retry list kept sorted by `seq` so a retried event goes out before younger
 * ones (order is per instance best effort; subscribers order by (epoch, n)).
 */
export class SendQueue {
  private readonly critical = new EntryQueue<OutboxEntry>();
  private readonly low = new EntryQueue<OutboxEntry>();
  private readonly retry: OutboxEntry[] = [];
  private nextSeq = 0;

  get size(): number {
    return this.critical.size + this.low.size + this.retry.length;
  }

  push(event: Event, priority: EventPriority): void {
    (priority === "low" ? this.low : this.critical).push({ seq: this.nextSeq++, event, priority });
  }

  /** The youngest queued low-priority entry, removed (a full outbox gives it up for a critical one). */
  popLow(): OutboxEntry | undefined {
    return this.low.pop();
  }

  /** What `takeNext` would return, left in place. */
  peekNext(): OutboxEntry | undefined {
    const r = this.retry[0];
    if (r !== undefined) return r;
    const c = this.critical.peek();
    const l = this.low.peek();
    if (c === undefined) return l;
    if (l === undefined) return c;
    return c.seq < l.seq ? c : l;
  }

  takeNext(): OutboxEntry | undefined {
    const r = this.retry.shift();
    if (r !== undefined) return r;
    const c = this.critical.peek();
    const l = this.low.peek();
    if (c === undefined) return this.low.shift();
    if (l === undefined) return this.critical.shift();
    return c.seq < l.seq ? this.critical.shift() : this.low.shift();
  }

  /** Back into the retry list at its `seq` place. */
  putBack(entry: OutboxEntry): void {
    const retry = this.retry;
    let lo = 0;
    let hi = retry.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((retry[mid]?.seq ?? 0) < entry.seq) lo = mid + 1;
      else hi = mid;
    }
    retry.splice(lo, 0, entry);
  }
}
