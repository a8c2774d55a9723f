import type { Event } from "@warden/proto";

/** The stream's acknowledgement of one publish. */
export interface PublishAck {
  /** True when the stream already had this event id (Nats-Msg-Id) and stored nothing new. */
  readonly duplicate: boolean;
  /** Stream sequence of the stored (or original) message, when known. */
  readonly streamSequence?: number;
}

/**
 * Where the outbox sends events (port; the NATS JetStream implementation is in
 * `@warden/audit`). `publish` resolves once the stream acknowledged the event,
 * and rejects on anything else (timeout, no connection, refusal): the outbox
 * retries it with the same id. It must be safe to call many times concurrently.
 * `signal` aborts when the outbox closes.
 */
export interface Publisher {
  publish(event: Event, signal: AbortSignal): Promise<PublishAck>;
  /**
   * Optional: calls `listener` when the transport is back after an outage
   * (e.g. NATS reconnected), so the outbox probes at once instead of waiting
   * out its back-off. Returns the unsubscribe function.
   */
  onReady?(listener: () => void): () => void;
}

/**
 * Acknowledges everything at once: for a coordinator without a NATS URL, whose
 * events reach only the log and WatchEvents. Events are still journaled (so
 * `recovered` works after a restart) and marked published straight away.
 */
export const nullPublisher: Publisher = {
  publish: () => Promise.resolve({ duplicate: false }),
};
