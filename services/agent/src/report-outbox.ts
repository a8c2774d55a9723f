import type { Logger } from "@warden/common";

export interface ReportOutboxOptions {
  /** What a heartbeat carries at most (the coordinator refuses a report over its bound). */
  readonly perHeartbeat: number;
  /** Records kept while no coordinator acknowledges them; older ones are dropped, counted and logged. */
  readonly maxPending: number;
  /** Names the records in the drop line ("artifact pulls"). */
  readonly what: string;
  readonly log: Logger;
}

/**
 * Records waiting for a coordinator to audit them (completed pulls, bundles a
 * start installed): numbered as they happen, carried by each heartbeat
 * (oldest first, at most `perHeartbeat`) until one carrying them is
 * acknowledged. While no coordinator acknowledges, at most `maxPending` are
 * kept; the oldest beyond go, and are counted (`dropped()`, a metric) and
 * logged in one line per drop, never silently. The agent logs each record
 * where it happens too, so a dropped one is still in its log.
 */
export class ReportOutbox<T> {
  private pending: (T & { readonly id: number })[] = [];
  private nextId = 1;
  private droppedTotal = 0;

  constructor(private readonly o: ReportOutboxOptions) {}

  record(e: T): void {
    this.pending.push({ ...e, id: this.nextId++ });
    if (this.pending.length > this.o.maxPending) {
      const gone = this.pending.splice(0, this.pending.length - this.o.maxPending).length;
      this.droppedTotal += gone;
      this.o.log.warn(`${this.o.what} not reported to the coordinator (none acknowledged): dropped from the audit; this agent's log has each`, { dropped: gone, droppedTotal: this.droppedTotal, kept: this.o.maxPending });
    }
  }

  /** What the next heartbeat carries. */
  next(): readonly (T & { readonly id: number })[] {
    return this.pending.slice(0, this.o.perHeartbeat);
  }

  /** A heartbeat carrying records up to `id` was acknowledged. */
  acknowledged(id: number): void {
    const i = this.pending.findIndex((e) => e.id > id);
    this.pending = i < 0 ? [] : this.pending.slice(i);
  }

  /** Records dropped unreported since this agent started. */
  dropped(): number {
    return this.droppedTotal;
  }
}

/** Completed pulls: a heartbeat carries at most 32 (the coordinator's bound); 1024 wait at most. */
export const pullReportBounds = { perHeartbeat: 32, maxPending: 1_024 } as const;
/** Bundles starts installed: a heartbeat carries at most 16 (the coordinator's bound); 256 wait at most. */
export const bundleInstallReportBounds = { perHeartbeat: 16, maxPending: 256 } as const;
