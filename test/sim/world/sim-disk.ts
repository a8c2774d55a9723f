import type { Journal, JournalRecord } from "@warden/outbox";
import type { ScopedClock } from "../coordinator/scoped-clock.js";
import type { SimRandom } from "../kernel/sim-random.js";

/**
 * The coordinator's disk: the journal's records, each durable once its fsync
 * completed. A crash keeps every durable record and a random prefix of the
 * rest (a torn tail: the write was cut mid-way and repair drops it).
 */
export class SimDisk {
  private records: { readonly record: JournalRecord; durable: boolean }[] = [];
  tornTails = 0;

  constructor(
    private readonly rng: SimRandom,
    private readonly fsyncMs: () => number,
  ) {}

  /** The Journal port one coordinator generation writes through. */
  journal(clock: ScopedClock): Journal {
    let pending: (() => void)[] = [];
    let armed = false;
    return {
      append: (record) =>
        new Promise<void>((resolve) => {
          const entry = { record, durable: false };
          this.records.push(entry);
          pending.push(() => {
            entry.durable = true;
            resolve();
          });
          if (!armed) {
            armed = true;
            // Group commit: one fsync covers every append issued before it.
            clock.setTimer(this.fsyncMs(), () => {
              armed = false;
              const batch = pending;
              pending = [];
              for (const f of batch) f();
            });
          }
        }),
      replay: () => Promise.resolve(this.records.map((r) => r.record)),
    };
  }

  /** The coordinator crashed: the unsynced tail is cut at a random point. Returns records dropped. */
  crash(): number {
    const firstUnsynced = this.records.findIndex((r) => !r.durable);
    if (firstUnsynced < 0) return 0;
    let keep = firstUnsynced;
    while (keep < this.records.length && this.records[keep]?.durable === false && this.rng.chance(0.5)) keep++;
    const dropped = this.records.length - keep;
    // Unsynced records past the cut are gone; kept ones were written whole.
    this.records = this.records.slice(0, keep).map((r) => ({ record: r.record, durable: true }));
    if (dropped > 0) this.tornTails++;
    return dropped;
  }

  /** Event ids of every durable `event` record (the audit oracle's must-arrive set). */
  durableEventIds(): Set<string> {
    const out = new Set<string>();
    for (const r of this.records) if (r.durable && r.record.kind === "event") out.add(r.record.event.id);
    return out;
  }

  get size(): number {
    return this.records.length;
  }
}
