import type { Logger } from "@warden/common";

/** One cache eviction as the heartbeat carries it (ArtifactEviction). */
export interface EvictionRecord {
  /** Increasing for this agent process (its boot epoch): the coordinator drops one it has seen. */
  readonly id: number;
  readonly sha256: string;
  readonly sizeBytes: number;
  readonly reason: string;
}

/** Evictions a heartbeat carries at most (the coordinator's bound). */
export const maxEvictionsPerHeartbeat = 64;
/** Evictions kept while no coordinator acknowledges them; older ones are dropped (logged: the log keeps them). */
const maxPendingEvictions = 1_024;

/**
 * The cache's evictions waiting for a coordinator to audit them: recorded as
 * they happen, carried by each heartbeat (oldest first, bounded) until one
 * carrying them is acknowledged. Every eviction is logged by the cache too,
 * so one dropped here (a coordinator away for over a thousand evictions) is
 * still on record.
 */
export class EvictionOutbox {
  private pending: EvictionRecord[] = [];
  private nextId = 1;

  constructor(private readonly log: Logger) {}

  record(e: Omit<EvictionRecord, "id">): void {
    this.pending.push({ ...e, id: this.nextId++ });
    if (this.pending.length > maxPendingEvictions) {
      const dropped = this.pending.splice(0, this.pending.length - maxPendingEvictions);
      this.log.warn("evictions not reported to the coordinator (none acknowledged); see the artifact evicted lines", { dropped: dropped.length });
    }
  }

  /** What the next heartbeat carries. */
  next(): readonly EvictionRecord[] {
    return this.pending.slice(0, maxEvictionsPerHeartbeat);
  }

  /** A heartbeat carrying evictions up to `id` was acknowledged. */
  acknowledged(id: number): void {
    const i = this.pending.findIndex((e) => e.id > id);
    this.pending = i < 0 ? [] : this.pending.slice(i);
  }
}
