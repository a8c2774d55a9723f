import { mkdir, open, readFile, rename, rm, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";
import { Code, WardenError, invalidArgument, isWardenError, throwIfAborted } from "@warden/common";
import { liveJournalRecords, type Journal, type JournalRecord } from "@warden/outbox";
import { decodeJournalFile, encodeJournalRecord, journalMagic } from "./record-codec.js";

export interface FileJournalOptions {
  /** The journal file; its directory is created if missing. */
  readonly path: string;
  /**
   * Compact when the file grows past this size (and has at least doubled since
   * the last compaction, so a large live set does not compact over and over).
   * @default 67108864 (64 MiB)
   */
  readonly compactAtBytes?: number;
  /** Largest record accepted; a bigger length in the file is treated as damage. @default 16777216 */
  readonly maxRecordBytes?: number;
}

export interface FileJournalStats {
  readonly sizeBytes: number;
  readonly appends: number;
  /** fsyncs of appended data; fewer than `appends` when appends shared one (group commit). */
  readonly fsyncs: number;
  readonly compactions: number;
  readonly compactionErrors: number;
  /** Bytes cut off a torn tail when the file was opened. */
  readonly truncatedTailBytes: number;
}

/**
 * What opening the journal cut off (a torn tail, see `decodeJournalFile`).
 * The caller reports it: a warn log, a metric and a `journal.repaired` event,
 * because the dropped records may include an acknowledged one.
 */
export interface JournalRepair {
  readonly path: string;
  /** Where the tail started: the file now ends here. */
  readonly offsetBytes: number;
  readonly droppedBytes: number;
  /** Records the tail held (a partial one counts; zero fill does not). */
  readonly droppedRecords: number;
}

/**
 * The coordinator's journal on disk (implements the outbox's `Journal` port).
 *
 * - Append-only, length-prefixed, CRC-checked records (format in record-codec.ts).
 * - Group commit: appends that arrive while a batch is being written and
 *   fsync'd wait and go out together in the next batch with one `fdatasync`;
 *   each append resolves only after the fsync covering it.
 * - Open: a torn tail (see `decodeJournalFile` for exactly what counts) is
 *   truncated, the truncation fsync'd, and described in `repaired`; a corrupt
 *   record with a valid record after it is DATA_LOSS naming the file.
 * - Compaction: past `compactAtBytes` the live records (`liveJournalRecords`)
 *   are written to `<path>.compact.tmp`, fsync'd, renamed over the journal, and
 *   the directory is fsync'd; a crash at any point leaves either the old or the
 *   new file whole. Appends wait while it runs.
 *
 * One process owns the file at a time; the coordinator holds it for its life.
 */
export interface FileJournal extends Journal {
  /** The torn tail cut off at open, or undefined when the file was whole. */
  readonly repaired: JournalRepair | undefined;
  stats(): FileJournalStats;
  /** Waits for pending appends, then closes the file. Later appends reject. */
  close(): Promise<void>;
}

interface Pending {
  readonly bytes: Buffer;
  readonly resolve: () => void;
  readonly reject: (err: unknown) => void;
}

/** Opens (or creates) the journal at `options.path`, repairing a torn tail. */
export async function openFileJournal(options: FileJournalOptions, signal?: AbortSignal): Promise<FileJournal> {
  const path = options.path;
  const tmpPath = `${path}.compact.tmp`;
  const compactAtBytes = options.compactAtBytes ?? 64 * 1024 * 1024;
  const maxRecordBytes = options.maxRecordBytes ?? 16 * 1024 * 1024;
  if (!(compactAtBytes > 0)) throw invalidArgument("compactAtBytes", "must be > 0");
  throwIfAborted(signal);
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // A compaction that crashed before its rename left only a temp file: the
  // journal itself is intact, so the temp file is just garbage.
  await rm(tmpPath, { force: true });

  let image: Buffer;
  try {
    image = await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    image = Buffer.alloc(0);
  }
  const decoded = decodeOrExplain(image, maxRecordBytes, path);
  // Owner-only: the journal holds the cluster's intents and events.
  let fh = await open(path, "a", 0o600);
  let sizeBytes = decoded.validEndBytes;
  let truncatedTailBytes = 0;
  let repaired: JournalRepair | undefined;
  try {
    if (decoded.validEndBytes < image.length) {
      truncatedTailBytes = image.length - decoded.validEndBytes;
      repaired = { path, offsetBytes: decoded.validEndBytes, droppedBytes: truncatedTailBytes, droppedRecords: decoded.tailRecords };
      await fh.truncate(decoded.validEndBytes);
      await fh.datasync();
    }
    if (sizeBytes === 0) {
      await fh.write(journalMagic);
      await fh.datasync();
      await syncDir(dir);
      sizeBytes = journalMagic.length;
    }
  } catch (err) {
    await fh.close();
    throw err;
  }

  let replayRecords: JournalRecord[] | undefined = decoded.records;
  let pending: Pending[] = [];
  let writing: Promise<void> | undefined;
  let closed = false;
  let broken: Error | undefined;
  let appends = 0;
  let fsyncs = 0;
  let compactions = 0;
  let compactionErrors = 0;
  let lastCompactedBytes = sizeBytes;

  const compact = async (): Promise<void> => {
    const current = decodeJournalFile(await readFile(path), maxRecordBytes);
    const live = liveJournalRecords(current.records);
    const tmp = await open(tmpPath, "w", 0o600);
    let newSize = journalMagic.length;
    try {
      await tmp.write(journalMagic);
      const chunks = live.map(encodeJournalRecord);
      for (const c of chunks) newSize += c.length;
      if (chunks.length > 0) await tmp.write(Buffer.concat(chunks));
      await tmp.sync();
    } finally {
      await tmp.close();
    }
    await rename(tmpPath, path);
    await syncDir(dir);
    // From the rename on, the old handle points at the unlinked old file.
    const old = fh;
    try {
      fh = await open(path, "a", 0o600);
    } catch (err) {
      broken = new WardenError(Code.Unavailable, `journal: cannot reopen after compaction: ${String(err)}`, { cause: err });
      throw err;
    } finally {
      await old.close();
    }
    sizeBytes = newSize;
    lastCompactedBytes = newSize;
    compactions++;
  };

  const writeLoop = async (): Promise<void> => {
    while (pending.length > 0) {
      const batch = pending;
      pending = [];
      if (broken !== undefined) {
        for (const p of batch) p.reject(broken);
        continue;
      }
      const bytes = batch.length === 1 ? (batch[0]?.bytes ?? Buffer.alloc(0)) : Buffer.concat(batch.map((p) => p.bytes));
      const before = sizeBytes;
      try {
        await fh.write(bytes);
        await fh.datasync();
        fsyncs++;
        sizeBytes += bytes.length;
        for (const p of batch) p.resolve();
      } catch (err) {
        // Cut a partial write off again, or a later record would follow a torn
        // one mid-file. If even that fails, stop accepting appends.
        try {
          await fh.truncate(before);
        } catch (truncErr) {
          broken = new WardenError(Code.Unavailable, `journal: write failed and could not be undone: ${String(truncErr)}`, { cause: err });
        }
        for (const p of batch) p.reject(new WardenError(Code.Unavailable, `journal: write failed: ${String(err)}`, { cause: err }));
        continue;
      }
      if (sizeBytes >= compactAtBytes && sizeBytes >= lastCompactedBytes * 2) {
        try {
          await compact();
        } catch {
          compactionErrors++;
          lastCompactedBytes = sizeBytes; // retry only after the file doubles again
          await rm(tmpPath, { force: true }).catch(() => undefined);
        }
      }
    }
  };

  const kick = (): void => {
    if (writing !== undefined) return;
    writing = writeLoop().finally(() => {
      writing = undefined;
      if (pending.length > 0) kick();
    });
  };

  return {
    repaired,

    append(record, appendSignal) {
      if (closed) return Promise.reject(new WardenError(Code.FailedPrecondition, "journal: closed"));
      // The signal is honoured only before the record is queued: once queued it
      // may already be on disk, and an append cannot be taken back.
      if (appendSignal?.aborted === true) return Promise.reject(WardenError.from(appendSignal.reason, Code.Canceled));
      const bytes = encodeJournalRecord(record);
      if (bytes.length - 9 > maxRecordBytes) return Promise.reject(invalidArgument("record", `larger than ${maxRecordBytes} bytes`));
      appends++;
      return new Promise<void>((resolve, reject) => {
        pending.push({ bytes, resolve, reject });
        kick();
      });
    },

    replay(replaySignal) {
      throwIfAborted(replaySignal);
      const records = replayRecords;
      if (records === undefined) return Promise.reject(new WardenError(Code.FailedPrecondition, "journal: replay is available once, at start"));
      replayRecords = undefined; // release the memory; the outbox keeps what it needs
      return Promise.resolve(records);
    },

    stats: () => ({ sizeBytes, appends, fsyncs, compactions, compactionErrors, truncatedTailBytes }),

    async close() {
      if (closed) return;
      closed = true;
      while (writing !== undefined) await writing;
      await fh.close();
    },
  };
}

/** Decodes the file image; DATA_LOSS names the file and what an operator can do. */
function decodeOrExplain(image: Buffer, maxRecordBytes: number, path: string): ReturnType<typeof decodeJournalFile> {
  try {
    return decodeJournalFile(image, maxRecordBytes);
  } catch (err) {
    if (!isWardenError(err, Code.DataLoss)) throw err;
    throw new WardenError(
      Code.DataLoss,
      `${path}: ${err.rawMessage}. Refusing to start rather than drop the durable records (stop intents, unpublished events) after it: keep a copy of the file for inspection, then move it aside to start with an empty journal`,
      { cause: err, details: { ...err.details, path } },
    );
  }
}

async function syncDir(dir: string): Promise<void> {
  let dh: FileHandle | undefined;
  try {
    dh = await open(dir, "r");
    await dh.sync();
  } finally {
    await dh?.close();
  }
}
