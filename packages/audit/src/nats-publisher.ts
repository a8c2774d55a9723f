import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Code, WardenError, throwIfAborted } from "@warden/common";
import { encodeEvent, subjectForEvent } from "@warden/events";
import type { PublishAck, Publisher } from "@warden/outbox";
import type { Event } from "@warden/proto";
import { defaultAuditStreamName } from "./audit-stream.js";

export interface NatsPublisherOptions {
  /** How long to wait for a PubAck before the outbox retries. @default 5000 */
  readonly ackTimeoutMs?: number;
  /** The stream that must store the event (publish fails otherwise). @default "WARDEN_EVENTS" */
  readonly streamName?: string;
}

/**
 * The outbox's Publisher on JetStream: protobuf payload on
 * `warden.events.<type>.<node>.<model>`, `Nats-Msg-Id` = event id (so a retry
 * within the stream's duplicate window is acknowledged as `duplicate` and not
 * stored twice). Every call is independent, so the outbox can keep many acks in
 * flight on one connection. Reconnection is the connection's business
 * (`connectAudit` reconnects forever); while it is down publishes fail or time
 * out and the outbox retries them.
 */
export function createNatsPublisher(nc: NatsConnection, options: NatsPublisherOptions = {}): Publisher {
  const timeout = options.ackTimeoutMs ?? 5_000;
  const js = jetstream(nc, { timeout });
  const streamName = options.streamName ?? defaultAuditStreamName;
  return {
    async publish(event: Event, signal: AbortSignal): Promise<PublishAck> {
      // The signal is checked, not raced: with hundreds of publishes in flight a
      // listener each would pile up on the outbox's one close signal, and the
      // ack timeout already bounds the wait (the outbox ignores late results
      // after close).
      throwIfAborted(signal);
      if (nc.isClosed()) throw new WardenError(Code.Unavailable, "nats connection closed");
      const ack = await js.publish(subjectForEvent(event), encodeEvent(event), { msgID: event.id, timeout, expect: { streamName } });
      return { duplicate: ack.duplicate, streamSequence: ack.seq };
    },
  };
}

/**
 * A Publisher usable before NATS is connected: publishes fail with UNAVAILABLE
 * (the outbox keeps and retries them) until `publisher` resolves, then go
 * through it. For a coordinator that starts while NATS is still down.
 */
export function createDeferredPublisher(publisher: Promise<Publisher>): Publisher {
  let ready: Publisher | undefined;
  let failed: unknown;
  publisher.then(
    (p) => {
      ready = p;
    },
    (err: unknown) => {
      failed = err;
    },
  );
  return {
    publish(event, signal) {
      if (ready !== undefined) return ready.publish(event, signal);
      return Promise.reject(new WardenError(Code.Unavailable, failed === undefined ? "nats not connected yet" : `nats connection failed: ${WardenError.from(failed).rawMessage}`));
    },
  };
}
