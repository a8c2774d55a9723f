import type { DashboardEvent } from "./dashboard-view.js";

/** Events the history keeps by default (each a few hundred bytes of JSON: well under a MiB). */
export const defaultHistoryEvents = 2_000;
/** Most events one history read returns. */
export const maxHistoryRead = 500;

/** What a history read keeps: every criterion given must match (absent = any). */
export interface HistoryFilter {
  /** Exact node id. */
  readonly nodeId?: string;
  /** Exact model id. */
  readonly model?: string;
  /** Event types: exact ("eviction.started") or a prefix ending in "." ("eviction."). */
  readonly types?: readonly string[];
}

function matches(e: DashboardEvent, f: HistoryFilter): boolean {
  if (f.nodeId !== undefined && e.nodeId !== f.nodeId) return false;
  if (f.model !== undefined && e.model !== f.model) return false;
  if (f.types !== undefined && f.types.length > 0 && !f.types.some((t) => (t.endsWith(".") ? e.type.startsWith(t) : e.type === t))) return false;
  return true;
}

/**
 * The coordinator's recent events for the dashboard's Events page: a
 * fixed-size ring (the event hub itself keeps none: WatchEvents only follows
 * from now on). Adding is O(1) and never allocates past the capacity; a read
 * walks the ring newest first, at most `capacity` entries, and returns at most
 * `limit`. Lost on restart — the NATS audit stream is the durable record.
 */
export class EventHistory {
  private readonly ring: (DashboardEvent | undefined)[];
  /** Where the next event goes. */
  private next = 0;
  private count = 0;

  constructor(readonly capacity: number = defaultHistoryEvents) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`EventHistory capacity must be a positive integer, got ${String(capacity)}`);
    this.ring = new Array<DashboardEvent | undefined>(capacity).fill(undefined);
  }

  add(e: DashboardEvent): void {
    this.ring[this.next] = e;
    this.next = (this.next + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
  }

  get size(): number {
    return this.count;
  }

  /** Up to `limit` matching events, oldest first (the newest `limit` of them). */
  read(filter: HistoryFilter, limit: number): DashboardEvent[] {
    const out: DashboardEvent[] = [];
    for (let i = 1; i <= this.count && out.length < limit; i++) {
      const e = this.ring[(this.next - i + this.capacity) % this.capacity];
      if (e !== undefined && matches(e, filter)) out.push(e);
    }
    return out.reverse();
  }
}
