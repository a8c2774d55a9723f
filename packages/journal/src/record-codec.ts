import { crc32 } from "node:zlib";
import { fromBinary } from "@bufbuild/protobuf";
import { EventSchema } from "@warden/proto";
import { Code, WardenError } from "@warden/common";
import { encodeEvent, type JournalRecord } from "@warden/outbox";

/**
 * File format, version 1:
 *
 *     file   = magic record*
 *     magic  = "WARDENJ1"                        (8 bytes)
 *     record = length:u32le crc:u32le kind:u8 body[length]
 *
 * `crc` is CRC-32 of `kind` and `body`. Bodies: kind 1 an Event in protobuf
 * binary (the same bytes as the NATS payload); kinds 2–5 a small JSON object.
 * A record is valid only if it is complete and its CRC matches, which is how a
 * torn last write (partial record, or a tail of zeros after a crash) is told
 * apart from the data before it.
 */
export const journalMagic = Buffer.from("WARDENJ1", "latin1");
export const recordHeaderBytes = 9;

const kindCode = { event: 1, published: 2, "stop-intent": 3, "stop-intent-cleared": 4, epoch: 5 } as const satisfies Record<
  JournalRecord["kind"],
  number
>;

/** One record framed for the file. */
export function encodeJournalRecord(record: JournalRecord): Buffer {
  let body: Uint8Array;
  switch (record.kind) {
    case "event":
      body = encodeEvent(record.event);
      break;
    case "published":
      body = json({ eventIds: record.eventIds });
      break;
    case "stop-intent": {
      const { kind: _kind, ...intent } = record;
      body = json(intent);
      break;
    }
    case "stop-intent-cleared":
      body = json({ incarnation: record.incarnation });
      break;
    case "epoch":
      body = json({ epoch: record.epoch.toString() });
      break;
  }
  const out = Buffer.allocUnsafe(recordHeaderBytes + body.length);
  out.writeUInt32LE(body.length, 0);
  out.writeUInt8(kindCode[record.kind], 8);
  out.set(body, recordHeaderBytes);
  out.writeUInt32LE(crc32(out.subarray(8)), 4);
  return out;
}

/** Result of scanning a journal file image. */
export interface DecodedJournal {
  readonly records: JournalRecord[];
  /** Offset just past the last valid record: everything after it is a torn tail. */
  readonly validEndBytes: number;
}

/**
 * Decodes a whole file image. Stops at the first record that is incomplete or
 * fails its CRC: if no valid record follows it, it is a torn tail and
 * `validEndBytes` says where to truncate. A bad record followed by a valid one
 * is not a torn write but corruption: DATA_LOSS, so an operator looks at it
 * instead of the journal silently dropping durable stop intents.
 */
export function decodeJournalFile(image: Buffer, maxRecordBytes: number): DecodedJournal {
  if (image.length < journalMagic.length) {
    // A crash while the file was being created: nothing was ever acknowledged.
    if (journalMagic.subarray(0, image.length).equals(image)) return { records: [], validEndBytes: 0 };
    throw new WardenError(Code.DataLoss, "journal: not a Warden journal (bad magic)");
  }
  if (!image.subarray(0, journalMagic.length).equals(journalMagic)) throw new WardenError(Code.DataLoss, "journal: not a Warden journal (bad magic)");
  const records: JournalRecord[] = [];
  let at = journalMagic.length;
  while (at < image.length) {
    const bad = badRecordAt(image, at, maxRecordBytes);
    if (bad !== undefined) {
      if (isTornTail(image, at, maxRecordBytes)) return { records, validEndBytes: at };
      throw new WardenError(Code.DataLoss, `journal: corrupt record at offset ${at} (${bad}) followed by more data`, { details: { offset: at } });
    }
    const length = image.readUInt32LE(at);
    const kind = image.readUInt8(at + 8);
    const body = image.subarray(at + recordHeaderBytes, at + recordHeaderBytes + length);
    records.push(decodeBody(kind, body, at));
    at += recordHeaderBytes + length;
  }
  return { records, validEndBytes: at };
}

function badRecordAt(image: Buffer, at: number, maxRecordBytes: number): string | undefined {
  if (image.length - at < recordHeaderBytes) return "incomplete header";
  const length = image.readUInt32LE(at);
  if (length > maxRecordBytes) return `length ${length} above the ${maxRecordBytes}-byte cap`;
  if (image.length - at - recordHeaderBytes < length) return "incomplete body";
  // Kind before checksum: cheap, and rejects zero-filled regions at once.
  const kind = image.readUInt8(at + 8);
  if (kind < 1 || kind > 5) return `unknown kind ${kind}`;
  const crc = image.readUInt32LE(at + 4);
  if (crc32(image.subarray(at + 8, at + recordHeaderBytes + length)) !== crc) return "checksum mismatch";
  return undefined;
}

/**
 * A bad record at `at` is a torn tail when no valid record starts anywhere
 * after it: appends are sequential, so a crash can only damage the end (a
 * partial record, possibly followed by zeros or stale blocks the file system
 * had not written). A valid record after the damage means the damage is not
 * a torn append.
 */
function isTornTail(image: Buffer, at: number, maxRecordBytes: number): boolean {
  for (let p = at + 1; p + recordHeaderBytes <= image.length; p++) {
    if (badRecordAt(image, p, maxRecordBytes) === undefined) return false;
  }
  return true;
}

function decodeBody(kind: number, body: Buffer, at: number): JournalRecord {
  try {
    switch (kind) {
      case 1:
        return { kind: "event", event: fromBinary(EventSchema, body) };
      case 2: {
        const o = parse(body) as { eventIds: string[] };
        return { kind: "published", eventIds: o.eventIds };
      }
      case 3: {
        const o = parse(body) as { incarnation: string; nodeId: string; model: string; address: string; reason: string; recordedAtMs: number };
        return { kind: "stop-intent", ...o };
      }
      case 4: {
        const o = parse(body) as { incarnation: string };
        return { kind: "stop-intent-cleared", incarnation: o.incarnation };
      }
      case 5: {
        const o = parse(body) as { epoch: string };
        return { kind: "epoch", epoch: BigInt(o.epoch) };
      }
      default:
        throw new Error(`unknown kind ${kind}`);
    }
  } catch (err) {
    // The CRC matched, so these are the bytes we wrote: a bug or a format change.
    throw new WardenError(Code.DataLoss, `journal: undecodable record at offset ${at}: ${String(err)}`, { cause: err });
  }
}

function json(value: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(value), "utf8");
}

function parse(body: Buffer): unknown {
  return JSON.parse(body.toString("utf8"));
}
