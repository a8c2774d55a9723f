import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { deadlineSignal, sleep } from "@warden/common";
import type { Journal } from "@warden/outbox";
import { readStreamHead } from "./journal-read.js";
import { ensureJournalStream, journalUnavailable, resolveJournalOptions, type JetStreamJournalOptions } from "./journal-stream.js";
import { JetStreamJournalImpl } from "./jetstream-journal-impl.js";

export interface JetStreamJournalStats {
  readonly appends: number;
  /** Publish attempts that failed and were sent again (same msg id). */
  readonly resends: number;
  readonly compactions: number;
  readonly compactionErrors: number;
  /** Records in the stream as far as this journal knows (replayed + acked − purged). */
  readonly heldRecords: number;
  /** Replayed records ignored as written by a superseded leader (`fenceStaleRecords`). */
  readonly staleIgnored: number;
}

/**
 * The coordinator's journal on a replicated JetStream stream (implements the
 * outbox's `Journal` port like the file journal; for `ha:`).
 *
 * - One record per message, framed and CRC-checked by the file journal's
 *   codec. `append` resolves on the stream's PubAck, which JetStream sends
 *   once a quorum of replicas has the message (2 of 3).
 * - Order and no doubles: every message carries a unique `Nats-Msg-Id` and
 *   `Nats-Expected-Last-Msg-Id` = the id of the record before it, so the
 *   stream can only ever hold a prefix of the issue order: if one publish is
 *   lost, every later one is refused, never stored out of order.
 * - Group commit: appends are published as they arrive, without waiting for
 *   earlier acks. When any attempt fails (ack timeout, no stream leader,
 *   refused), sending stops until every publish in flight has settled; the
 *   stream's real last message is read back (from the stream leader), the
 *   records up to it are resolved, and the rest are published again in order
 *   under their same ids (a stored one comes back `duplicate`), until each
 *   append's deadline.
 * - Failure: an append that is not acked within `appendTimeoutMs` rejects
 *   UNAVAILABLE naming the stream (no quorum never hangs). If it had been
 *   sent, its outcome is unknown — the stream may have stored it before
 *   losing quorum, and a later replay may return it (whole). One that was
 *   still waiting to be sent is dropped and never stored.
 * - Compaction (after `compactAtRecords` acks, when nothing is unacked): the
 *   live set (`liveJournalRecords`) is appended again as ordinary records,
 *   then everything before its first sequence is purged in one request.
 *   Re-appending rather than one rollup message keeps the live set unbounded
 *   by `max_payload`, and a crash between the two steps leaves old records
 *   plus copies, which `reduceJournal` folds to the same state (repeated
 *   event ids count once; intents, marks and epochs are idempotent). Appends
 *   go on while it runs; they land after the copies and survive the purge.
 *
 * - Leader-epoch fence (with `writerEpoch`): each record carries the lease
 *   epoch its writer held when sending it (header `Warden-Epoch`); nothing is
 *   sent while the lease is not held. The first append after replay expects
 *   the last sequence replayed, so a new leader's first record lands right
 *   behind what it read. After a failed send the stream's last record is
 *   judged by `judgeStreamHead`: re-sending happens only behind this writer's
 *   own record or the one its chain follows; a newer epoch's record makes
 *   every append fail for good (`StaleLeaderEpochError`, `onSuperseded`),
 *   another writer's record ABORTED — never re-chained on top of it. Replay
 *   drops records of an epoch that a record before them superseded
 *   (`fenceStaleRecords`).
 */
export interface JetStreamJournal extends Journal {
  readonly stream: string;
  stats(): JetStreamJournalStats;
  /** Rejects what is pending (UNAVAILABLE) and every later append. Does not close the connection. */
  close(): void;
}

/** Opens (creating if absent) the journal stream and learns its last record; bounded by `replayTimeoutMs` × 2 and `signal`. */
export async function openJetStreamJournal(nc: NatsConnection, options: JetStreamJournalOptions = {}, signal?: AbortSignal): Promise<JetStreamJournal> {
  const o = resolveJournalOptions(options, nc.info?.max_payload ?? 1024 * 1024);
  const jsm = await ensureJournalStream(nc, o, signal);
  const js = jetstream(nc, { timeout: o.ackTimeoutMs });
  // Right after a server loss the stream may be electing a leader (503): retried until the open deadline.
  const d = deadlineSignal(o.clock, o.replayTimeoutMs, `journal stream ${o.stream}: open`, signal);
  try {
    for (;;) {
      try {
        return new JetStreamJournalImpl(o, jsm, js, (await readStreamHead(jsm, o, d.signal))?.id);
      } catch (err) {
        if (d.signal.aborted) throw journalUnavailable(o.stream, "open", err);
        await sleep(o.clock, Math.min(250, o.ackTimeoutMs), d.signal).catch(() => undefined);
      }
    }
  } finally {
    d.cleanup();
  }
}
