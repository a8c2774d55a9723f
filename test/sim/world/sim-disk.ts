import type { Journal, JournalRecord } from "@warden/outbox";
import type { ScopedClock } from "../coordinator/scoped-clock.js";
import type { SimRandom } from "../kernel/sim-random.js";

/**
 * The coordinator's disk: the journal's records, each durable once an fsync
 * issued after it completed (fsync is file-wide: it covers every earlier
 * write, whoever issued it). A crash keeps every durable record and a random
 * prefix of the unsynced tail (a torn tail: the write was cut mid-way and
 * repair drops it). A crashed generation writes nothing: a dead process has
 * no file descriptor, so its late promise chains cannot reach the disk.
 */
export class SimDisk {
  private records: { readonly record: JournalRecord; durable: boolean }[] = [];
  /** Records before this index are durable (the prefix covered by a completed fsync). */
  private durableCount = 0;
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
          // kill -9 happened: the write never happens and never answers.
          if (!clock.alive()) return;
          this.records.push({ record, durable: false });
          pending.push(resolve);
          if (!armed) {
            armed = true;
            // Group commit: one fsync covers every append issued before it.
            clock.setTimer(this.fsyncMs(), () => {
              armed = false;
              this.sync();
              const batch = pending;
              pending = [];
              for (const f of batch) f();
            });
          }
        }),
      replay: () => Promise.resolve(this.records.map((r) => r.record)),
    };
  }

  /** An fsync completed: everything written so far is durable. */
  private sync(): void {
    for (let i = this.durableCount; i < this.records.length; i++) {
      const r = this.records[i];
      if (r !== undefined) r.durable = true;
    }
    this.durableCount = this.records.length;
  }

  /** The coordinator crashed: the unsynced tail is cut at a random point. Returns records dropped. */
  crash(): number {
    let keep = this.durableCount;
    while (keep < this.records.length && this.rng.chance(0.5)) keep++;
    const dropped = this.records.length - keep;
    // Unsynced records past the cut are gone; kept ones were written whole.
    this.records.length = keep;
    this.sync();
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
