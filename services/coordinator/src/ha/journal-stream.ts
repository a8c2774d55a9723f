import { jetstreamManager, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Code, WardenError, deadlineSignal, invalidArgument, isWardenError, raceSignal, sleep, systemClock, type Clock } from "@warden/common";
import { recordHeaderBytes } from "@warden/journal";

export interface JetStreamJournalOptions {
  /** Stream name. @default "WARDEN_JOURNAL" */
  readonly stream?: string;
  /** The one subject records are published on. @default "warden.journal" */
  readonly subject?: string;
  /** Copies of the stream: 3 in an HA cluster (an append is acked by 2 of 3). @default 3, bounds 1–5 */
  readonly replicas?: number;
  /** Wait for one PubAck before the attempt counts as failed and is retried. @default 1000, bounds 50–30 000 */
  readonly ackTimeoutMs?: number;
  /** Whole deadline of one append, retries included: then UNAVAILABLE naming the stream. @default 5000, bounds 100–120 000 */
  readonly appendTimeoutMs?: number;
  /** Deadline of replay (and of opening the stream, ×2). @default 30 000, bounds 100–600 000 */
  readonly replayTimeoutMs?: number;
  /**
   * Largest record body accepted (INVALID_ARGUMENT above it); the stream's
   * max_msg_size is set to it plus the record header, so the server refuses
   * a bigger one too. Must fit the server's max_payload with room for headers.
   * @default 524288 (512 KiB), bounds 1 KiB – (max_payload − 4 KiB)
   */
  readonly maxRecordBytes?: number;
  /** Compact once this many records were acked since the last compaction (and the log is ≥ 2× the live set). @default 100 000, bounds 16–10 000 000 */
  readonly compactAtRecords?: number;
  readonly clock?: Clock;
  /**
   * The leader-epoch fence: the lease epoch this writer holds at this moment,
   * undefined while it holds none (checked against the clock at each send).
   * Each record is stamped with it; while it is undefined nothing is sent
   * (appends wait, then fail UNAVAILABLE at their deadline). Without it the
   * journal is unfenced (records unstamped), e.g. for a single writer in tests.
   */
  readonly writerEpoch?: () => bigint | undefined;
  /** A newer epoch wrote to the stream: this writer is an ex-leader (called once; must not throw). */
  readonly onSuperseded?: (newerEpoch: bigint, detail: string) => void;
}

export interface ResolvedJournalOptions {
  readonly stream: string;
  readonly subject: string;
  readonly replicas: number;
  readonly ackTimeoutMs: number;
  readonly appendTimeoutMs: number;
  readonly replayTimeoutMs: number;
  readonly maxRecordBytes: number;
  readonly compactAtRecords: number;
  readonly clock: Clock;
  readonly writerEpoch: (() => bigint | undefined) | undefined;
  readonly onSuperseded: ((newerEpoch: bigint, detail: string) => void) | undefined;
}

const streamNamePattern = /^[-_a-zA-Z0-9]{1,64}$/;
const subjectPattern = /^[-_a-zA-Z0-9]+(\.[-_a-zA-Z0-9]+){0,15}$/;
/** Room left in max_payload for the publish headers (msg id, expectations). */
const headerAllowanceBytes = 4096;

function intIn(field: string, v: number, lo: number, hi: number, unit = ""): number {
  if (!Number.isInteger(v) || v < lo || v > hi) throw invalidArgument(field, `must be an integer from ${String(lo)} to ${String(hi)}${unit}`);
  return v;
}

/** Validates every option at once (nothing is created on a bad one). */
export function resolveJournalOptions(options: JetStreamJournalOptions, maxPayloadBytes: number): ResolvedJournalOptions {
  const stream = options.stream ?? "WARDEN_JOURNAL";
  const subject = options.subject ?? "warden.journal";
  if (!streamNamePattern.test(stream)) throw invalidArgument("stream", "must be 1–64 of [-_a-zA-Z0-9]");
  if (subject.length > 256 || !subjectPattern.test(subject)) throw invalidArgument("subject", "must be a literal NATS subject (no wildcards), at most 256 characters");
  const ackTimeoutMs = intIn("ackTimeoutMs", options.ackTimeoutMs ?? 1_000, 50, 30_000, " ms");
  const appendTimeoutMs = intIn("appendTimeoutMs", options.appendTimeoutMs ?? 5_000, 100, 120_000, " ms");
  if (ackTimeoutMs > appendTimeoutMs) throw invalidArgument("ackTimeoutMs", "must not exceed appendTimeoutMs");
  return {
    stream,
    subject,
    replicas: intIn("replicas", options.replicas ?? 3, 1, 5),
    ackTimeoutMs,
    appendTimeoutMs,
    replayTimeoutMs: intIn("replayTimeoutMs", options.replayTimeoutMs ?? 30_000, 100, 600_000, " ms"),
    maxRecordBytes: intIn("maxRecordBytes", options.maxRecordBytes ?? 512 * 1024, 1024, Math.max(1024, maxPayloadBytes - headerAllowanceBytes), " bytes (server max_payload − 4 KiB)"),
    compactAtRecords: intIn("compactAtRecords", options.compactAtRecords ?? 100_000, 16, 10_000_000),
    clock: options.clock ?? systemClock,
    writerEpoch: options.writerEpoch,
    onSuperseded: options.onSuperseded,
  };
}

/** Seconds → the nanoseconds JetStream durations are given in. */
const nanos = (ms: number): number => ms * 1_000_000;

/**
 * Creates the journal stream, or checks an existing one matches (same
 * subject, replicas, file storage). Limits retention with no limits: records
 * leave only by the journal's own purge. The duplicate window covers a whole
 * append deadline twice, so a retried publish is always recognised.
 */
export async function ensureJournalStream(nc: NatsConnection, o: ResolvedJournalOptions, signal?: AbortSignal): Promise<JetStreamManager> {
  const d = deadlineSignal(o.clock, o.replayTimeoutMs * 2, `journal stream ${o.stream}: open`, signal);
  try {
    // Its account-info request can time out right after a server loss (a reconnect, an election,
    // a loaded machine): retried until the open deadline like the steps below, not failed at once.
    let jsm: JetStreamManager | undefined;
    while (jsm === undefined) {
      try {
        jsm = await raceSignal(jetstreamManager(nc, { timeout: o.ackTimeoutMs * 5 }), d.signal);
      } catch (err) {
        if (d.signal.aborted) throw journalUnavailable(o.stream, "open", err);
        await sleep(o.clock, Math.min(250, o.ackTimeoutMs), d.signal).catch(() => undefined);
      }
    }
    const config = {
      name: o.stream,
      subjects: [o.subject],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      num_replicas: o.replicas,
      max_msg_size: o.maxRecordBytes + recordHeaderBytes,
      duplicate_window: nanos(Math.max(120_000, o.appendTimeoutMs * 2)),
      deny_delete: true,
      allow_rollup_hdrs: false,
    };
    // An existing stream is only checked, never created again or changed: a provisioned one needs no create right.
    const existing = await raceSignal(jsm.streams.info(o.stream), d.signal).catch(() => undefined);
    if (existing !== undefined) {
      checkJournalStream(existing.config, o);
      return jsm;
    }
    // Stream creation waits for a replicated stream leader: retried until the deadline.
    for (;;) {
      try {
        await raceSignal(jsm.streams.add(config), d.signal);
        break;
      } catch (err) {
        if (d.signal.aborted) throw journalUnavailable(o.stream, "open", err);
        const info = await raceSignal(jsm.streams.info(o.stream), d.signal).catch(() => undefined);
        if (info !== undefined) {
          checkJournalStream(info.config, o);
          break;
        }
      }
    }
    return jsm;
  } catch (err) {
    if (isWardenError(err, Code.FailedPrecondition)) throw err;
    throw journalUnavailable(o.stream, "open", err);
  } finally {
    d.cleanup();
  }
}

/** FAILED_PRECONDITION unless an existing journal stream has the subject, replicas and storage the journal needs. */
function checkJournalStream(c: StreamConfig, o: ResolvedJournalOptions): void {
  if (c.num_replicas !== o.replicas || c.storage !== StorageType.File || c.subjects.length !== 1 || c.subjects[0] !== o.subject) {
    throw new WardenError(Code.FailedPrecondition, `journal stream ${o.stream} exists with another configuration (subjects ${c.subjects.join(",")}, replicas ${String(c.num_replicas)}, storage ${c.storage}): fix or delete it`);
  }
}

/** The one error every journal operation fails with when the stream has no quorum (or no server answers). */
export function journalUnavailable(stream: string, what: string, cause: unknown): WardenError {
  if (isWardenError(cause, Code.Unavailable) && cause.rawMessage.startsWith(`journal stream ${stream}`)) return cause;
  const why = cause instanceof Error ? cause.message : String(cause);
  return new WardenError(Code.Unavailable, `journal stream ${stream}: ${what} not acknowledged by a quorum of its replicas (${why})`, { cause, details: { stream } });
}
