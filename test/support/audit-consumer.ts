/**
 * Reads the whole audit stream with a plain JetStream ordered consumer
 * (@nats-io/jetstream and the protobuf schema only, none of Warden's audit
 * code), in stream order, duplicates included: what an outside auditor sees.
 */
import { fromBinary } from "@bufbuild/protobuf";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
// The auditor shares no code with what it audits, its connection included; it reads once every server is back.
// eslint-disable-next-line no-restricted-imports
import { connect } from "@nats-io/transport-node";
import { EventSchema, type Event } from "@warden/proto";

export interface StreamEvent {
  /** The stream sequence it was stored at. */
  readonly seq: number;
  readonly event: Event;
}

/** Every message of `stream` up to its last sequence at the time of the call, decoded. */
export async function readAuditStream(servers: readonly string[], stream = "WARDEN_EVENTS", timeoutMs = 60_000): Promise<StreamEvent[]> {
  const nc = await connect({ servers: [...servers], name: "nemesis-audit-reader", timeout: 5_000 });
  const deadline = AbortSignal.timeout(timeoutMs);
  try {
    const jsm = await jetstreamManager(nc, { timeout: 5_000 });
    const info = await jsm.streams.info(stream);
    const last = info.state.last_seq;
    const out: StreamEvent[] = [];
    if (info.state.messages === 0) return out;
    const consumer = await jetstream(nc, { timeout: 5_000 }).consumers.get(stream, { deliver_policy: DeliverPolicy.All });
    const messages = await consumer.consume({ max_messages: 256 });
    const stop = (): void => void messages.close();
    deadline.addEventListener("abort", stop, { once: true });
    try {
      for await (const m of messages) {
        out.push({ seq: m.seq, event: fromBinary(EventSchema, m.data) });
        if (m.seq >= last) break;
      }
    } finally {
      deadline.removeEventListener("abort", stop);
      await messages.close();
    }
    if (out.length === 0 || out[out.length - 1]!.seq < last) throw new Error(`read ${String(out.length)} events of ${stream} up to sequence ${String(out[out.length - 1]?.seq ?? 0)}, not ${String(last)}, within ${String(timeoutMs)} ms`);
    return out;
  } finally {
    await nc.close();
  }
}
