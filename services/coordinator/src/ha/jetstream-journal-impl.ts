import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { headers, nuid } from "@nats-io/transport-node";
import { Code, StaleLeaderEpochError, WardenError, abortReason, deadlineSignal, invalidArgument, sleep, raceSignal } from "@warden/common";
import { encodeJournalRecord, recordHeaderBytes } from "@warden/journal";
import { fenceStaleRecords, journalMaySend, judgeStreamHead, liveJournalRecords, type JournalRecord } from "@warden/outbox";
import type { JetStreamJournal, JetStreamJournalStats } from "./jetstream-journal.js";
import { readAllRecords, readStreamHead, writerEpochHeader } from "./journal-read.js";
import { journalUnavailable, type ResolvedJournalOptions } from "./journal-stream.js";

// The journal's implementation; what it guarantees is documented on the
// `JetStreamJournal` interface (jetstream-journal.ts), which opens it.

interface Pending {
  readonly id: string;
  readonly record: JournalRecord;
  readonly bytes: Buffer;
  /** Sent at least once: from then on, dropping it leaves its outcome unknown. */
  sent: boolean;
  inFlight: boolean;
  settled: boolean;
  resolve(seq: number): void;
  reject(err: WardenError): void;
}

export class JetStreamJournalImpl implements JetStreamJournal {
  readonly stream: string;
  /** Unacked appends in issue order (one owner: this class). */
  private chain: Pending[] = [];
  private inFlight = 0;
  /** A send failed: nothing new goes out until recovery has re-read the stream. */
  private recovering = false;
  private recoveryRunning = false;
  /** Id the next publish expects as the stream's last one. */
  private lastSentId: string | undefined;
  /** The last id known stored in order: what the unacked chain follows (the fence's anchor). */
  private anchorId: string | undefined;
  /** The first send after replay expects this last sequence (the new leader's marker lands right behind what it read). */
  private expectSeq: number | undefined;
  /** The epoch of this writer's latest send (0 when unfenced). */
  private ownEpoch = 0n;
  /** Set once another writer is found at the stream's end: every append fails with it from then on. */
  private fenced: WardenError | undefined;
  private staleIgnored = 0;
  /** Acked records by stream sequence (the compaction's input). */
  private held: { seq: number; record: JournalRecord }[] = [];
  private ackedSinceCompaction = 0;
  private compacting = false;
  private replayed = false;
  private closed = false;
  private readonly idPrefix = nuid.next();
  private nextId = 0;
  private appends = 0;
  private resends = 0;
  private compactions = 0;
  private compactionErrors = 0;

  constructor(
    private readonly o: ResolvedJournalOptions,
    private readonly jsm: JetStreamManager,
    private readonly js: JetStreamClient,
    lastId: string | undefined,
  ) {
    this.stream = o.stream;
    this.lastSentId = lastId;
    this.anchorId = lastId;
  }

  append(record: JournalRecord, signal?: AbortSignal): Promise<void> {
    if (this.closed) return Promise.reject(new WardenError(Code.FailedPrecondition, `journal stream ${this.stream}: closed`));
    if (this.fenced !== undefined) return Promise.reject(this.fenced);
    if (signal?.aborted === true) return Promise.reject(abortReason(signal));
    const bytes = encodeJournalRecord(record);
    if (bytes.length - recordHeaderBytes > this.o.maxRecordBytes) return Promise.reject(invalidArgument("record", `larger than ${String(this.o.maxRecordBytes)} bytes`));
    this.appends++;
    return this.enqueue(record, bytes, signal).then(() => undefined);
  }

  private enqueue(record: JournalRecord, bytes: Buffer, signal?: AbortSignal): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const d = deadlineSignal(this.o.clock, this.o.appendTimeoutMs, `journal stream ${this.stream}: append`, signal);
      const p: Pending = {
        id: `${this.idPrefix}-${String(this.nextId++)}`,
        record,
        bytes,
        sent: false,
        inFlight: false,
        settled: false,
        resolve: (seq) => {
          d.cleanup();
          resolve(seq);
        },
        reject: (err) => {
          d.cleanup();
          reject(err);
        },
      };
      d.signal.addEventListener(
        "abort",
        () => {
          if (p.settled) return;
          const reason = abortReason(d.signal);
          const err = reason.code === Code.DeadlineExceeded ? journalUnavailable(this.stream, "append", reason) : reason;
          // Not in flight: drop it, so it is never sent (again); if an earlier attempt was
          // sent, its outcome is unknown. In flight: it stays in the chain until that
          // publish settles, so the recovery that follows sees the order whole.
          if (!p.inFlight) this.chain = this.chain.filter((q) => q !== p);
          this.settle(p, undefined, err);
        },
        { once: true },
      );
      this.chain.push(p);
      if (this.recovering || !this.send(p)) {
        if (this.inFlight === 0) void this.recover();
      }
    });
  }

  private settle(p: Pending, seq: number | undefined, err?: WardenError): void {
    if (p.settled) return;
    p.settled = true;
    if (seq !== undefined) p.resolve(seq);
    else p.reject(err ?? journalUnavailable(this.stream, "append", "not acknowledged"));
  }

  /** False (nothing sent, recovery mode) while the lease is not held: no record goes out without an epoch held now. */
  private send(p: Pending): boolean {
    const epoch = this.o.writerEpoch?.();
    if (!journalMaySend(this.o.writerEpoch !== undefined, epoch)) {
      this.recovering = true;
      return false;
    }
    const h = headers();
    if (epoch !== undefined) {
      this.ownEpoch = epoch;
      h.set(writerEpochHeader, epoch.toString());
    }
    const expect = this.expectSeq !== undefined ? { lastSequence: this.expectSeq } : this.lastSentId === undefined ? { lastSequence: 0 } : { lastMsgID: this.lastSentId };
    this.expectSeq = undefined;
    this.lastSentId = p.id;
    p.sent = true;
    p.inFlight = true;
    this.inFlight++;
    this.js.publish(this.o.subject, p.bytes, { msgID: p.id, expect, headers: h, timeout: this.o.ackTimeoutMs, retries: 1 }).then(
      (ack) => {
        this.acked(p, ack.seq);
      },
      () => {
        this.recovering = true;
      },
    ).finally(() => {
      p.inFlight = false;
      this.inFlight--;
      if (this.recovering && this.inFlight === 0) void this.recover();
    });
    return true;
  }

  private acked(p: Pending, seq: number): void {
    const i = this.chain.indexOf(p);
    // An ack for p means every record before it is stored too (the msg-id chain).
    const done = i < 0 ? [] : this.chain.splice(0, i + 1);
    if (done.length > 0) this.anchorId = p.id;
    for (const q of done) {
      // Records before p are stored too, at sequences not learnt here (compaction does not need them).
      this.held.push({ seq: q === p ? seq : -1, record: q.record });
      this.settle(q, q === p ? seq : -1);
    }
    this.ackedSinceCompaction += done.length;
    this.maybeCompact();
  }

  /** Re-reads the stream's last id, resolves what it shows stored, re-sends the rest in order. */
  private async recover(): Promise<void> {
    if (this.recoveryRunning) return;
    this.recoveryRunning = true;
    try {
      while (!this.closed && this.fenced === undefined) {
        // Unsent appends whose deadline passed were dropped from the chain already;
        // sent ones stay until settled here (a later one's ack may still prove them stored).
        if (this.chain.length === 0) {
          this.recovering = false;
          break;
        }
        let head: Awaited<ReturnType<typeof readStreamHead>>;
        try {
          // Lease not held (paused, or an ex-leader not told yet): nothing is re-sent until it is again.
          if (!journalMaySend(this.o.writerEpoch !== undefined, this.o.writerEpoch?.())) throw new Error("lease not held");
          head = await readStreamHead(this.jsm, this.o);
        } catch {
          this.resends++;
          this.chain = this.chain.filter((q) => !q.settled || q.inFlight);
          if (this.chain.length === 0) {
            this.recovering = false;
            break;
          }
          // No stream leader answers at once (503): back off rather than spin.
          await sleep(this.o.clock, Math.min(250, this.o.ackTimeoutMs));
          continue;
        }
        const verdict = judgeStreamHead({ head, anchorId: this.anchorId, chainIds: this.chain.map((q) => q.id), ownEpoch: this.ownEpoch });
        if (verdict.t === "superseded") {
          this.fence(new StaleLeaderEpochError(this.ownEpoch, verdict.newerEpoch));
          this.o.onSuperseded?.(verdict.newerEpoch, `journal stream ${this.stream}: a record of epoch ${String(verdict.newerEpoch)} is at its end`);
          break;
        }
        if (verdict.t === "foreign") {
          this.fence(new WardenError(Code.Aborted, `journal stream ${this.stream}: another writer (epoch ${verdict.writerEpoch === undefined ? "none" : String(verdict.writerEpoch)}) appended after this writer's last stored record; this writer appends nothing more`, { details: { stream: this.stream } }));
          break;
        }
        if (verdict.t === "behind-own") this.anchorId = head?.id;
        if (verdict.t === "stored") {
          for (const q of this.chain.splice(0, verdict.upTo + 1)) {
            this.held.push({ seq: -1, record: q.record });
            this.ackedSinceCompaction++;
            this.settle(q, -1);
          }
          this.anchorId = head?.id;
        }
        // Settled (given up) ones not proven stored are not re-sent: their caller was told UNAVAILABLE.
        this.chain = this.chain.filter((q) => !q.settled);
        this.lastSentId = this.anchorId;
        this.expectSeq = undefined;
        this.recovering = false;
        let lapsed = false;
        for (const q of this.chain) {
          this.resends++;
          if (!this.send(q)) {
            lapsed = true;
            break;
          }
        }
        // The lease lapsed before anything went out: wait for it here (in-flight sends call back otherwise).
        if (lapsed && this.inFlight === 0) continue;
        break;
      }
    } finally {
      this.recoveryRunning = false;
    }
  }

  /** Terminal: every unacked append and every later one fails with `err`; nothing more is sent. */
  private fence(err: WardenError): void {
    this.fenced = err;
    this.recovering = false;
    const chain = this.chain;
    this.chain = [];
    for (const p of chain) this.settle(p, undefined, err);
  }

  private maybeCompact(): void {
    if (this.compacting || this.chain.length > 0 || this.recovering) return;
    if (this.ackedSinceCompaction < this.o.compactAtRecords) return;
    const live = liveJournalRecords(this.held.map((h) => h.record));
    // An empty live set is not compacted: the stream would be empty and the msg-id
    // chain would lose its anchor. With an epoch recorded (always, in the coordinator) it never is.
    if (live.length === 0 || this.held.length < live.length * 2) return;
    this.compacting = true;
    void this.compact(live).finally(() => {
      this.compacting = false;
    });
  }

  private async compact(live: readonly JournalRecord[]): Promise<void> {
    const before = this.held;
    const copies = live.map((r) => this.enqueue(r, encodeJournalRecord(r)));
    try {
      const seqs = await Promise.all(copies);
      // The first copy's own sequence: one learnt only through recovery (-1) is not used.
      const firstSeq = seqs[0] ?? -1;
      if (firstSeq <= 0) throw new Error("no sequence for the first copy");
      const d = deadlineSignal(this.o.clock, this.o.appendTimeoutMs, `journal stream ${this.stream}: purge`);
      try {
        await raceSignal(this.jsm.streams.purge(this.stream, { seq: firstSeq }), d.signal);
      } finally {
        d.cleanup();
      }
      const beforeSet = new Set(before);
      this.held = this.held.filter((h) => !beforeSet.has(h));
      this.ackedSinceCompaction = 0;
      this.compactions++;
    } catch {
      // Old records plus copies fold to the same state; the next compaction cleans up.
      await Promise.allSettled(copies);
      this.compactionErrors++;
      this.ackedSinceCompaction = 0;
    }
  }

  async replay(signal?: AbortSignal): Promise<readonly JournalRecord[]> {
    if (this.replayed) throw new WardenError(Code.FailedPrecondition, `journal stream ${this.stream}: replay is available once, at start`);
    this.replayed = true;
    const d = deadlineSignal(this.o.clock, this.o.replayTimeoutMs, `journal stream ${this.stream}: replay`, signal);
    try {
      // Just after a server loss or restart one read can time out while the stream
      // settles: read again from the start until the deadline.
      for (;;) {
        try {
          const out = await readAllRecords(this.jsm, this.js, this.o, d.signal);
          return this.acceptReplay(out);
        } catch (err) {
          if (this.fenced !== undefined || (err instanceof WardenError && err.code === Code.DataLoss)) throw err;
          if (d.signal.aborted) {
            const reason = abortReason(d.signal);
            throw reason.code === Code.Canceled ? reason : journalUnavailable(this.stream, "replay", err);
          }
          await sleep(this.o.clock, Math.min(250, this.o.ackTimeoutMs), d.signal).catch(() => undefined);
        }
      }
    } finally {
      d.cleanup();
    }
  }

  /** Applies the fence to what was read: stale records ignored; the next send lands right behind the last one read. */
  private acceptReplay(out: Awaited<ReturnType<typeof readAllRecords>>): JournalRecord[] {
    const fenced = fenceStaleRecords(out);
    this.staleIgnored += fenced.stale;
    const mine = this.o.writerEpoch?.();
    if (mine !== undefined && fenced.newestEpoch !== undefined && fenced.newestEpoch > mine) {
      // A newer leader already wrote: this one must not start on what it read.
      const err = new StaleLeaderEpochError(mine, fenced.newestEpoch);
      this.fence(err);
      this.o.onSuperseded?.(fenced.newestEpoch, `journal stream ${this.stream}: replay found epoch ${String(fenced.newestEpoch)}`);
      throw err;
    }
    const kept = new Set(fenced.records);
    this.held = [...out.filter((r) => kept.has(r.record)).map((r) => ({ seq: r.seq, record: r.record })), ...this.held];
    const last = out.at(-1);
    if (last !== undefined) {
      this.anchorId = last.id;
      this.lastSentId = last.id;
    }
    this.expectSeq = last?.seq ?? 0;
    return fenced.records;
  }

  stats(): JetStreamJournalStats {
    return { appends: this.appends, resends: this.resends, compactions: this.compactions, compactionErrors: this.compactionErrors, heldRecords: this.held.length, staleIgnored: this.staleIgnored };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.chain) this.settle(p, undefined, journalUnavailable(this.stream, "append", "journal closed"));
    this.chain = [];
  }
}
