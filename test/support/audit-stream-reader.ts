/**
 * Reads back every event a JetStream stream holds, in stream order (direct
 * gets by sequence, no consumer left behind). For tests that check what the
 * coordinator published.
 */
import { jetstreamManager, JetStreamApiError } from "@nats-io/jetstream";
import type { Event } from "@warden/proto";
import { connectAudit, defaultAuditStreamName, type NatsCredentials } from "@warden/audit";
import { decodeEvent } from "@warden/events";

/** The stored events, or undefined when the stream does not exist. */
export async function storedEvents(url: string, credentials: NatsCredentials = { kind: "none" }, stream = defaultAuditStreamName): Promise<Event[] | undefined> {
  const nc = await connectAudit({ servers: url, credentials, name: "test-reader" });
  try {
    const jsm = await jetstreamManager(nc);
    let info;
    try {
      info = await jsm.streams.info(stream);
    } catch (err) {
      if (err instanceof JetStreamApiError) return undefined;
      throw err;
    }
    const out: Event[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = await jsm.streams.getMessage(stream, { seq });
      if (m !== null) out.push(decodeEvent(m.data));
    }
    return out;
  } finally {
    await nc.close();
  }
}
