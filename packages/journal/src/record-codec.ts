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
  /**
   * Records the torn tail held, as far as its headers can be followed (see
   * {@link countTailRecords}): 0 when there is no tail or it is only zero fill.
   */
  readonly tailRecords: number;
}

/**
 * Decodes a whole file image. Stops at the first record that is incomplete or
 * fails its checks (kind, length cap, CRC), and decides whether what starts
 * there is a torn tail or corruption.
 *
 * The tail is every byte from the start of that first bad record to the end
 * of the file. It is a **torn tail**, and `validEndBytes` says where to cut,
 * when no valid record (complete, known kind, length under the cap, CRC
 * matching) starts at any byte offset inside it. That covers what a crash in
 * the middle of an append can leave, all of it after the last complete append:
 * an incomplete last record (cut inside its header or body); a complete last
 * record whose CRC fails, with nothing after it; either followed by zero fill
 * or stale blocks the file system had allocated but not written; and sectors
 * of the last append landing out of order. The records in a torn tail are
 * dropped — including a complete last record that was acknowledged and then
 * damaged on disk, which cannot be told apart from a torn write — and the
 * caller must say so (`journal.repaired`).
 *
 * A bad record with a valid record anywhere after it is **corruption in the
 * middle**: appends are sequential, so a crash cannot damage a record and
 * leave a later one intact. That is DATA_LOSS, so an operator looks at it
 * instead of the journal silently dropping the durable records after it.
 */
export function decodeJournalFile(image: Buffer, maxRecordBytes: number): DecodedJournal {
  if (image.length < journalMagic.length) {
    // A crash while the file was being created: nothing was ever acknowledged.
    if (journalMagic.subarray(0, image.length).equals(image)) return { records: [], validEndBytes: 0, tailRecords: 0 };
    throw new WardenError(Code.DataLoss, "journal: not a Warden journal (bad magic)");
  }
  if (!image.subarray(0, journalMagic.length).equals(journalMagic)) throw new WardenError(Code.DataLoss, "journal: not a Warden journal (bad magic)");
  const records: JournalRecord[] = [];
  let at = journalMagic.length;
  while (at < image.length) {
    const bad = badRecordAt(image, at, maxRecordBytes);
    if (bad !== undefined) {
      const next = validRecordAfter(image, at, maxRecordBytes);
      if (next === undefined) return { records, validEndBytes: at, tailRecords: countTailRecords(image, at, maxRecordBytes) };
      throw new WardenError(Code.DataLoss, `journal: corrupt record at offset ${at} (${bad}) followed by a valid record at offset ${next}`, { details: { offset: at, nextValidOffset: next } });
    }
    const length = image.readUInt32LE(at);
    const kind = image.readUInt8(at + 8);
    const body = image.subarray(at + recordHeaderBytes, at + recordHeaderBytes + length);
    records.push(decodeBody(kind, body, at));
    at += recordHeaderBytes + length;
  }
  return { records, validEndBytes: at, tailRecords: 0 };
}

/**
 * Decodes one framed record that must fill `bytes` exactly (a JetStream
 * message body: one record per message). Anything else — short, over the
 * cap, unknown kind, CRC mismatch, trailing bytes — is DATA_LOSS: the bytes
 * were stored whole, so damage here is not a torn write.
 */
export function decodeJournalRecord(bytes: Buffer, maxRecordBytes: number): JournalRecord {
  const bad = badRecordAt(bytes, 0, maxRecordBytes);
  if (bad !== undefined) throw new WardenError(Code.DataLoss, `journal: corrupt record (${bad})`);
  const length = bytes.readUInt32LE(0);
  if (recordHeaderBytes + length !== bytes.length) throw new WardenError(Code.DataLoss, `journal: ${String(bytes.length - recordHeaderBytes - length)} bytes after the record`);
  return decodeBody(bytes.readUInt8(8), bytes.subarray(recordHeaderBytes), 0);
}

function badRecordAt(image: Buffer, at: number, maxRecordBytes: number): string | undefined {
  if (image.length - at < recordHeaderBytes) return "incomplete header";
  const length = image.readUInt32LE(at);
  if (length > maxRecordBytes) return `length ${length} above the ${maxRecordBytes}-byte cap`;
  if (image.length - at - recordHeaderBytes < length) return "incomplete body";
  // Kind before checksum: cheap, and rejects zero-filled regions at once.
  const kind = image.readUInt8(at + 8);
  if (!isKnownKind(kind)) return `unknown kind ${kind}`;
  const crc = image.readUInt32LE(at + 4);
  if (crc32(image.subarray(at + 8, at + recordHeaderBytes + length)) !== crc) return "checksum mismatch";
  return undefined;
}

function isKnownKind(kind: number): boolean {
  return kind >= 1 && kind <= 5;
}

/** The offset of the first valid record starting after `at`, if any (only called on damage, at open). */
function validRecordAfter(image: Buffer, at: number, maxRecordBytes: number): number | undefined {
  for (let p = at + 1; p + recordHeaderBytes <= image.length; p++) {
    if (badRecordAt(image, p, maxRecordBytes) === undefined) return p;
  }
  return undefined;
}

/**
 * How many records a torn tail starting at `at` held: the first bad record
 * counts as one unless the whole tail is zero bytes (pre-allocated fill, no
 * record was being written); after it, each further header that names a
 * known kind and a length under the cap, with its header inside the file,
 * counts as one more. A lower bound when a damaged length hides what follows.
 */
export function countTailRecords(image: Buffer, at: number, maxRecordBytes: number): number {
  if (at >= image.length || image.subarray(at).every((b) => b === 0)) return 0;
  let count = 1;
  const first = image.length - at >= recordHeaderBytes ? image.readUInt32LE(at) : Number.POSITIVE_INFINITY;
  let p = at + recordHeaderBytes + first;
  while (p + recordHeaderBytes <= image.length) {
    const length = image.readUInt32LE(p);
    if (length > maxRecordBytes || !isKnownKind(image.readUInt8(p + 8))) break;
    count++;
    p += recordHeaderBytes + length;
  }
  return count;
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
