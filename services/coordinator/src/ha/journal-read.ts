import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { deadlineSignal, raceSignal } from "@warden/common";
import { decodeJournalRecord } from "@warden/journal";
import type { JournalRecord, StreamHead } from "@warden/outbox";
import { journalUnavailable, type ResolvedJournalOptions } from "./journal-stream.js";

/** The header carrying the lease epoch its writer held when it appended the record (the leader-epoch fence). */
export const writerEpochHeader = "Warden-Epoch";

/** One stored record with what the fence needs. */
export interface StoredRecord {
  readonly seq: number;
  readonly id: string;
  readonly writerEpoch: bigint | undefined;
  readonly record: JournalRecord;
}

export function writerEpochOf(h: MsgHdrs | undefined): bigint | undefined {
  const v = h?.get(writerEpochHeader) ?? "";
  return /^[0-9]{1,20}$/.test(v) ? BigInt(v) : undefined;
}

/** The stream's last message (from the stream leader) as the fence judges it, or undefined when empty; bounded by 2 × ackTimeoutMs. */
export async function readStreamHead(jsm: JetStreamManager, o: ResolvedJournalOptions, signal?: AbortSignal): Promise<(StreamHead & { readonly seq: number }) | undefined> {
  const d = deadlineSignal(o.clock, o.ackTimeoutMs * 2, `journal stream ${o.stream}: read last record`, signal);
  try {
    const info = await raceSignal(jsm.streams.info(o.stream), d.signal);
    if (info.state.messages === 0) return undefined;
    const m = await raceSignal(jsm.streams.getMessage(o.stream, { seq: info.state.last_seq }), d.signal);
    if (m === null) return undefined;
    return { id: m.header.get("Nats-Msg-Id"), writerEpoch: writerEpochOf(m.header), seq: m.seq };
  } catch (err) {
    throw journalUnavailable(o.stream, "read of the last record", err);
  } finally {
    d.cleanup();
  }
}

/** One pass over the stream with an ordered consumer, up to the last sequence at its start. */
export async function readAllRecords(jsm: JetStreamManager, js: JetStreamClient, o: ResolvedJournalOptions, signal: AbortSignal): Promise<StoredRecord[]> {
  const info = await raceSignal(jsm.streams.info(o.stream), signal);
  const lastSeq = info.state.last_seq;
  if (info.state.messages === 0) return [];
  const consumer = await raceSignal(js.consumers.get(o.stream), signal);
  const messages = await raceSignal(consumer.consume({ max_messages: 256 }), signal);
  const stop = (): void => {
    void messages.close();
  };
  signal.addEventListener("abort", stop, { once: true });
  const out: StoredRecord[] = [];
  try {
    for await (const m of messages) {
      out.push({ seq: m.seq, id: m.headers?.get("Nats-Msg-Id") ?? "", writerEpoch: writerEpochOf(m.headers), record: decodeJournalRecord(Buffer.from(m.data), o.maxRecordBytes) });
      if (m.seq >= lastSeq) break;
    }
  } finally {
    signal.removeEventListener("abort", stop);
    await messages.close();
  }
  if ((out.at(-1)?.seq ?? 0) < lastSeq) throw new Error(`read stopped at ${String(out.at(-1)?.seq ?? 0)} of ${String(lastSeq)}`);
  return out;
}
