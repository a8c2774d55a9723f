import { Code, StaleLeaderEpochError, WardenError } from "@warden/common";
import { fenceStaleRecords, journalMaySend, judgeStreamHead, type Journal, type JournalRecord } from "@warden/outbox";
import type { ScopedClock } from "../coordinator/scoped-clock.js";
import type { Coverage } from "../check/coverage.js";
import type { SimRandom } from "../kernel/sim-random.js";

/** The HA journal's leader-epoch fence (the runner's `writerEpoch` and `onSuperseded`). */
export interface JournalFence {
  /** The epoch this term holds at this moment; undefined while the lease is not held. */
  writerEpoch(): bigint | undefined;
  onSuperseded(newerEpoch: bigint): void;
}

interface Pending {
  readonly record: JournalRecord;
  readonly resolve: () => void;
  readonly reject: (err: WardenError) => void;
  settled: boolean;
  cancelDeadline: () => void;
}

/**
 * The coordinator's disk: the journal's records, each durable once an fsync
 * issued after it completed (fsync is file-wide: it covers every earlier
 * write, whoever issued it). A crash keeps every durable record and a random
 * prefix of the unsynced tail (a torn tail: the write was cut mid-way and
 * repair drops it). A crashed generation writes nothing: a dead process has
 * no file descriptor, so its late promise chains cannot reach the disk.
 */
export class SimDisk {
  /** `id` and `writerEpoch`: the HA stream's message id and Warden-Epoch header. */
  private records: { readonly record: JournalRecord; durable: boolean; readonly id?: string; readonly writerEpoch?: bigint | undefined }[] = [];
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
   * meanwhile, the refusal is what the journal recovers from: it reads the
   * stream's last record back and — without `fence` (the journal before the
   * epoch fence) — sends the rest again behind it, so an old leader's appends
   * land after the new leader's records a few ms late. With `fence` (the
   * production rules of @warden/outbox epoch-fence.ts): nothing is sent while
   * `writerEpoch()` holds no epoch (`journalMaySend`), each record carries the
   * epoch it was sent under, the head is judged by `judgeStreamHead` (a newer
   * epoch's record fails this writer for good: StaleLeaderEpochError and
   * `onSuperseded`; another writer's, ABORTED), and replay drops stale records
   * (`fenceStaleRecords`). Appends not acknowledged within `appendDeadlineMs`
   * fail UNAVAILABLE and are never sent after that. `writer` names the
   * generation and its term's epoch (the ground truth of who wrote each record).
   */
  sharedJournal(clock: ScopedClock, writer: { readonly generation: number; readonly epoch: bigint }, resends = true, fence?: JournalFence, appendDeadlineMs = 5_000): Journal {
    let expected = this.records.length;
    let anchorId = this.records[this.records.length - 1]?.id;
    let ownEpoch = 0n;
    let nextId = 0;
    let fenced: WardenError | undefined;
    // PubAcks of pipelined publishes come back in publish order.
    let lastAckAtMs = 0;
    let recovering = false;
    let waiting: Pending[] = [];
    const settle = (item: Pending, err?: WardenError): void => {
      if (item.settled) return;
      item.settled = true;
      item.cancelDeadline();
      if (err === undefined) item.resolve();
      else item.reject(err);
    };
    const store = (item: Pending): void => {
      const epoch = fence?.writerEpoch();
      if (epoch !== undefined) ownEpoch = epoch;
      const id = `${String(writer.generation)}-${String(nextId++)}`;
      this.records.push({ record: item.record, durable: true, id, writerEpoch: epoch });
      this.durableCount = this.records.length;
      expected = this.records.length;
      anchorId = id;
      this.stored(item.record, writer.generation, writer.epoch);
      lastAckAtMs = Math.max(lastAckAtMs, clock.now() + this.fsyncMs());
      clock.setTimer(lastAckAtMs - clock.now(), () => { settle(item); });
    };
    const recoverSoon = (delayMs: number): void => {
      recovering = true;
      clock.setTimer(delayMs, recover);
    };
    const recover = (): void => {
      recovering = false;
      const q = waiting.filter((i) => !i.settled);
      waiting = [];
      if (q.length === 0 || fenced !== undefined) return;
      if (fence !== undefined) {
        if (!journalMaySend(true, fence.writerEpoch())) {
          waiting = q;
          recoverSoon(250);
          return;
        }
        const last = this.records[this.records.length - 1];
        const head = last === undefined ? undefined : { id: last.id ?? "", writerEpoch: last.writerEpoch };
        const verdict = judgeStreamHead({ head, anchorId, chainIds: [], ownEpoch });
        if (verdict.t === "superseded" || verdict.t === "foreign") {
          const err = verdict.t === "superseded" ? new StaleLeaderEpochError(ownEpoch, verdict.newerEpoch) : new WardenError(Code.Aborted, "journal stream WARDEN_JOURNAL: another writer appended after this writer's last stored record");
          fenced = err;
          this.coverage?.hit(`ha.journal-fenced.${verdict.t}`);
          for (const i of q) settle(i, err);
          if (verdict.t === "superseded") fence.onSuperseded(verdict.newerEpoch);
          return;
        }
      }
      this.coverage?.hit("ha.journal-resent-after-refusal");
      for (const i of q) store(i);
    };
    const send = (item: Pending): void => {
      if (fence !== undefined && !journalMaySend(true, fence.writerEpoch())) {
        // The lease is not held at this moment: nothing goes out until it is (or the deadline).
        waiting.push(item);
        if (!recovering) recoverSoon(250);
        return;
      }
      if (this.records.length !== expected) {
        // Wrong last msg id: refused; the journal reads the stream's last record back.
        this.fencedAppends++;
        if (!resends) return; // the world as modelled before: refused for good, failing at its deadline
        waiting.push(item);
        recoverSoon(2 + this.rng.next() * 20);
        return;
      }
      store(item);
    };
    return {
      append: (record) =>
        new Promise<void>((resolve, reject) => {
          if (!clock.alive()) return;
          if (fenced !== undefined) {
            reject(fenced);
            return;
          }
          const item: Pending = { record, resolve, reject, settled: false, cancelDeadline: () => {} };
          item.cancelDeadline = clock.setTimer(appendDeadlineMs, () => {
            settle(item, new WardenError(Code.Unavailable, "journal stream WARDEN_JOURNAL: append not acknowledged (timeout)"));
          });
          if (recovering) waiting.push(item);
          else send(item);
        }),
      replay: () => {
        expected = this.records.length;
        anchorId = this.records[this.records.length - 1]?.id;
        if (fence === undefined) return Promise.resolve(this.records.map((r) => r.record));
        const replayed = fenceStaleRecords(this.records.map((r) => ({ writerEpoch: r.writerEpoch, record: r.record })));
        if (replayed.stale > 0) this.coverage?.hit("ha.replay-dropped-stale", replayed.stale);
        return Promise.resolve(replayed.records);
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

  /** Incarnations with a stop intent stored in the journal (cleared since or not). */
  storedIntents(): Set<string> {
    const out = new Set<string>();
    for (const { record } of this.records) if (record.kind === "stop-intent") out.add(record.incarnation);
    return out;
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
