import type { JournalRecord } from "./journal-record.js";

/**
 * The durable log behind the outbox and the stop intents (port; the file
 * implementation is `@warden/journal`).
 *
 * Contract:
 * - `append` resolves only once the record is on stable storage (fsync'd);
 *   concurrent appends may share one fsync (group commit). Records are replayed
 *   in the order their appends were issued.
 * - `replay` returns every record still held, in order; it is called once,
 *   before the first append.
 * - The journal may compact itself, keeping exactly what
 *   {@link liveJournalRecords} keeps.
 */
export interface Journal {
  append(record: JournalRecord, signal?: AbortSignal): Promise<void>;
  replay(signal?: AbortSignal): Promise<readonly JournalRecord[]>;
}
