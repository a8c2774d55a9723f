import { isPlanted } from "@warden/common";
import type { JournalRecord } from "./journal-record.js";

/**
 * The leader-epoch fence of a replicated journal, as pure rules: the
 * JetStream journal applies them to real streams and the simulation to its
 * model, so both enforce the same thing.
 *
 * Every record a leader appends is stamped with the lease epoch it held when
 * it appended (the writer epoch). A new leader's first append after its
 * replay is conditional on the last sequence it replayed, so it lands right
 * behind what it read; from then on the stream's last record carries the new
 * epoch, and an older writer can neither chain behind it (its expected last
 * id no longer matches) nor re-chain on top of it ({@link judgeStreamHead}).
 * Replay keeps the log's order of epochs ({@link fenceStaleRecords}).
 */

/** One replayed record with the epoch of the writer that appended it (undefined: written without one, e.g. before fencing existed). */
export interface EpochStampedRecord {
  readonly writerEpoch: bigint | undefined;
  readonly record: JournalRecord;
}

export interface FencedReplay {
  /** The records a replaying leader folds, in log order. */
  readonly records: JournalRecord[];
  /** Records dropped as written by a superseded leader. */
  readonly stale: number;
  /** The newest writer epoch in the log; undefined when no record carries one. */
  readonly newestEpoch: bigint | undefined;
}

/**
 * Replay rule: once a record of epoch e′ is in the log, a later record of an
 * epoch e < e′ is a stale write of a leader that e′ superseded (it decided
 * nothing in force) and is ignored. Unstamped records are kept: they predate
 * the fence and carry no epoch to compare.
 */
export function fenceStaleRecords(entries: Iterable<EpochStampedRecord>): FencedReplay {
  const records: JournalRecord[] = [];
  let stale = 0;
  let newest: bigint | undefined;
  for (const e of entries) {
    if (e.writerEpoch !== undefined) {
      if (newest !== undefined && e.writerEpoch < newest) {
        stale++;
        continue;
      }
      newest = e.writerEpoch;
    }
    records.push(e.record);
  }
  return { records, stale, newestEpoch: newest };
}

/** The stream's last record as the writer reads it back after a failed append. */
export interface StreamHead {
  readonly id: string;
  readonly writerEpoch: bigint | undefined;
}

/**
 * What a writer may do after a failed append, given the stream's last record:
 * - `stored`: its chain up to `upTo` (an index into `chainIds`) is stored; re-send the rest behind it.
 * - `none-stored`: the last record is still the one its chain follows; re-send the whole chain.
 * - `behind-own`: the last record is this writer's own (its epoch: one writer per epoch) but no
 *   longer in its chain — one given up at its deadline (its caller told UNAVAILABLE, outcome
 *   unknown) that was stored after all. The stream holds a prefix of the issue order, so the whole
 *   chain is after it: re-send the chain behind it.
 * - `superseded`: a newer epoch wrote; this writer is an ex-leader and appends nothing more (terminal).
 * - `foreign`: another writer appended (not newer, or unstamped); re-chaining on top of a
 *   record this writer never read would hide it, so this is terminal too.
 */
export type StreamHeadVerdict =
  | { readonly t: "stored"; readonly upTo: number }
  | { readonly t: "none-stored" }
  | { readonly t: "behind-own" }
  | { readonly t: "superseded"; readonly newerEpoch: bigint }
  | { readonly t: "foreign"; readonly writerEpoch: bigint | undefined };

export interface StreamHeadInput {
  /** The stream's last record; undefined when the stream is empty. */
  readonly head: StreamHead | undefined;
  /** The id this writer's unacked chain follows (its last record known stored, or the last one it replayed); undefined when it started on an empty stream. */
  readonly anchorId: string | undefined;
  /** Ids of this writer's unacked appends, in issue order. */
  readonly chainIds: readonly string[];
  /** The epoch this writer appends under. */
  readonly ownEpoch: bigint;
}

/** Retry rule: never re-chain behind a record that is neither this writer's own nor the one it followed. */
export function judgeStreamHead(input: StreamHeadInput): StreamHeadVerdict {
  const { head, anchorId, chainIds, ownEpoch } = input;
  if (head === undefined) return anchorId === undefined ? { t: "none-stored" } : { t: "foreign", writerEpoch: undefined };
  const k = chainIds.indexOf(head.id);
  if (k >= 0) return { t: "stored", upTo: k };
  if (head.id === anchorId) return { t: "none-stored" };
  // Planted bug "exleader-append-accepted": re-chain behind whatever is last, as before the fence.
  if (isPlanted("exleader-append-accepted")) return { t: "none-stored" };
  if (head.writerEpoch !== undefined && head.writerEpoch > ownEpoch) return { t: "superseded", newerEpoch: head.writerEpoch };
  // An unstamped record counts as epoch 0, an unfenced writer's own.
  if ((head.writerEpoch ?? 0n) === ownEpoch) return { t: "behind-own" };
  return { t: "foreign", writerEpoch: head.writerEpoch };
}

/**
 * Send rule: a writer with an epoch port (`fenced`) sends a record only while
 * it holds an epoch at that moment (`epochNow`); an unfenced writer always.
 */
export function journalMaySend(fenced: boolean, epochNow: bigint | undefined): boolean {
  // Planted bug "exleader-append-accepted": sent whether the lease is held or not.
  if (isPlanted("exleader-append-accepted")) return true;
  return !fenced || epochNow !== undefined;
}
