import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Code, WardenError, deadlineSignal, raceSignal, systemClock } from "@warden/common";
import type { AuditStreamHead } from "@warden/outbox";

/** The header naming the lease epoch a fenced audit publish was sent under. */
export const writerEpochHeader = "Warden-Epoch";

/**
 * The audit stream's last message as the publish fence judges it (from the
 * stream leader: stream info, then a get by sequence), undefined for a stream
 * never written; bounded by 2 × `timeoutMs` and `signal`. A last message that
 * can no longer be read (aged out between the two calls) is named by its
 * sequence alone, with writer epoch 0.
 */
export async function readAuditStreamHead(nc: NatsConnection, stream: string, timeoutMs: number, signal: AbortSignal): Promise<AuditStreamHead | undefined> {
  const d = deadlineSignal(systemClock, timeoutMs * 2, `audit stream ${stream}: read of the last event`, signal);
  try {
    const jsm = await raceSignal(jetstreamManager(nc, { timeout: timeoutMs }), d.signal);
    const info = await raceSignal(jsm.streams.info(stream), d.signal);
    const seq = info.state.last_seq;
    if (seq === 0) return undefined;
    const m = await raceSignal(jsm.streams.getMessage(stream, { seq }), d.signal).catch(() => null);
    if (m === null) return { seq, writerEpoch: 0n };
    const v = m.header.get(writerEpochHeader);
    const id = m.header.get("Nats-Msg-Id");
    return { seq, writerEpoch: /^[0-9]{1,20}$/.test(v) ? BigInt(v) : 0n, ...(id === "" ? {} : { msgId: id }) };
  } catch (err) {
    throw new WardenError(Code.Unavailable, `audit stream ${stream}: cannot read its last event: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  } finally {
    d.cleanup();
  }
}
