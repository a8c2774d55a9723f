import { Code, WardenError } from "@warden/common";
import type { Journal, JournalRecord } from "@warden/outbox";
import type { ScopedClock } from "../coordinator/scoped-clock.js";
import type { Coverage } from "../check/coverage.js";
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
    private readonly coverage?: Coverage,
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

  /**
   * The HA profile's journal: the JetStream stream both coordinators share
   * (services/coordinator/src/ha/jetstream-journal.ts). A record is stored
   * (on a quorum) when it lands and acknowledged a few ms later; a writer
   * that dies meanwhile never hears the ack but the record stays. Every
   * append expects the stream's last record to be the last one this writer
   * saw (`Nats-Expected-Last-Msg-Id`). When another coordinator appended
   * meanwhile (the new leader's epoch record), the refusal is what the real
   * journal recovers from: it re-reads the stream's last record and sends
   * the rest again, in order, expecting that one — so an old leader's appends
   * land after the new leader's records, a few ms late. `writer` names the
   * generation and the leader epoch it writes with (the ground truth of who
   * wrote each record).
   */
  sharedJournal(clock: ScopedClock, writer: { readonly generation: number; readonly epoch: bigint }, resends = true, appendDeadlineMs = 5_000): Journal {
    let expected = this.records.length;
    // PubAcks of pipelined publishes come back in publish order.
    let lastAckAtMs = 0;
    let recovering = false;
    let waiting: { readonly record: JournalRecord; readonly resolve: () => void }[] = [];
    const store = (record: JournalRecord, resolve: () => void): void => {
      this.records.push({ record, durable: true });
      this.durableCount = this.records.length;
      expected = this.records.length;
      this.stored(record, writer.generation, writer.epoch);
      lastAckAtMs = Math.max(lastAckAtMs, clock.now() + this.fsyncMs());
      clock.setTimer(lastAckAtMs - clock.now(), resolve);
    };
    return {
      append: (record) =>
        new Promise<void>((resolve, reject) => {
          if (!clock.alive()) return;
          if (recovering) {
            waiting.push({ record, resolve });
            return;
          }
          if (this.records.length !== expected && !resends) {
            // The world as modelled before: refused for good, failing at the append's deadline.
            this.fencedAppends++;
            clock.setTimer(appendDeadlineMs, () => {
              reject(new WardenError(Code.Unavailable, "journal stream WARDEN_JOURNAL: wrong last msg id (another coordinator appended)"));
            });
            return;
          }
          if (this.records.length !== expected) {
            // Wrong last msg id: the journal reads the stream's last record back and sends again against it.
            this.fencedAppends++;
            this.coverage?.hit("ha.journal-resent-after-refusal");
            recovering = true;
            waiting.push({ record, resolve });
            clock.setTimer(2 + this.rng.next() * 20, () => {
              recovering = false;
              expected = this.records.length;
              const q = waiting;
              waiting = [];
              for (const w of q) store(w.record, w.resolve);
            });
            return;
          }
          store(record, resolve);
        }),
      replay: () => {
        expected = this.records.length;
        return Promise.resolve(this.records.map((r) => r.record));
      },
    };
  }

  /** HA ground truth: the newest leader epoch any stored record was written with. */
  newestWriterEpoch = 0n;
  /** HA ground truth: incarnations any stored record names (what a replaying leader can know of). */
  readonly journaledIncarnations = new Set<string>();
  /** HA profile: a record was stored from a writer whose leader epoch is older than one already stored. */
  onStaleAppend: ((record: JournalRecord, generation: number, epoch: bigint, newest: bigint) => void) | undefined;

  private stored(record: JournalRecord, generation: number, epoch: bigint): void {
    if (record.kind === "event" && record.event.incarnation !== "") this.journaledIncarnations.add(record.event.incarnation);
    else if (record.kind === "stop-intent") this.journaledIncarnations.add(record.incarnation);
    if (epoch < this.newestWriterEpoch) {
      this.coverage?.hit("ha.stale-append-stored");
      this.onStaleAppend?.(record, generation, epoch, this.newestWriterEpoch);
    }
    if (epoch > this.newestWriterEpoch) this.newestWriterEpoch = epoch;
  }

  /** Incarnations whose stop intent a stored record cleared (the HA carry-over check). */
  clearedIntents(): Set<string> {
    const last = new Map<string, boolean>();
    for (const { record } of this.records) {
      if (record.kind === "stop-intent") last.set(record.incarnation, false);
      else if (record.kind === "stop-intent-cleared") last.set(record.incarnation, true);
    }
    return new Set([...last].filter(([, cleared]) => cleared).map(([inc]) => inc));
  }

  /** Shared-journal appends refused because another coordinator had appended since. */
  fencedAppends = 0;

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
