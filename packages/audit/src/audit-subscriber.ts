import type { NatsConnection } from "@nats-io/transport-node";
import { nanos } from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type ConsumerConfig,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import type { Event } from "@warden/proto";
import { Code, WardenError, invalidArgument } from "@warden/common";
import {
  RecentIdSet,
  decodeEvent,
  eventFilterSubject,
  eventTypeOf,
  matchesEventFilter,
  type EventFilter,
  type EventType,
} from "@warden/events";
import { raceAbort } from "@warden/common";
import { defaultAuditStreamName } from "./audit-stream.js";

/**
 * Where a new durable starts. An existing durable always resumes where it was
 * (its acks are stored on the server), whatever is given here.
 */
export type AuditSubscribeStart =
  | { readonly kind: "all" }
  | { readonly kind: "new" }
  | { readonly kind: "time"; readonly at: Date }
  | { readonly kind: "sequence"; readonly streamSequence: number };

export interface AuditSubscribeOptions {
  /** Durable consumer name: letters, digits, `-` and `_`. Reuse it to resume after a restart. */
  readonly durable: string;
  /** @default "WARDEN_EVENTS" */
  readonly stream?: string;
  /** Type / node / model; the narrowest subject goes to the server, the rest is filtered here. */
  readonly filter?: EventFilter;
  /** @default { kind: "all" } */
  readonly start?: AuditSubscribeStart;
  /**
   * How many recent event ids are remembered for de-duplication (beyond the
   * stream's duplicate window and across redeliveries); about 100 bytes each.
   * @default 100000
   */
  readonly dedupCapacity?: number;
  /** Ids already handled (e.g. read back from the tail of an audit file), so a restart does not repeat them. */
  readonly seenEventIds?: Iterable<string>;
  /** Messages pulled per request. @default 256 */
  readonly batchSize?: number;
  /** Pull request expiry (nats.js requires ≥ 1000). @default 30000 */
  readonly pullExpiresMs?: number;
  /** Redelivery if an event is not acked within this time. @default 30000 */
  readonly ackWaitMs?: number;
  /** Stops the subscription; the iteration then ends without an error. */
  readonly signal?: AbortSignal;
  /** Told about messages that are not Warden events (they are terminated, never redelivered). */
  readonly onInvalid?: (info: { readonly streamSequence: number; readonly subject: string; readonly error: WardenError }) => void;
}

/** One event handed to the reader. */
export interface AuditDelivery {
  readonly event: Event;
  readonly type: EventType;
  readonly subject: string;
  readonly streamSequence: number;
  /** True when the server delivered this message before (the previous reader did not ack it). */
  readonly redelivered: boolean;
}

/**
 * Reads audit events through a durable pull consumer with explicit acks.
 *
 * Each event is yielded once per id (a bounded set of recent ids drops
 * redeliveries and re-published copies) and acknowledged when the reader asks
 * for the next one, i.e. after the loop body handled it: a reader that crashes
 * mid-event gets it again after `ackWaitMs` (at-least-once; pass
 * `seenEventIds` to skip what was already written). Events outside the filter
 * and duplicates are acknowledged without being yielded. The iteration ends
 * when `signal` aborts; breaking out of the loop ends it too (without acking
 * the current event).
 */
export function subscribeAuditEvents(nc: NatsConnection, options: AuditSubscribeOptions): AsyncIterable<AuditDelivery> {
  const stream = options.stream ?? defaultAuditStreamName;
  const filter = options.filter ?? {};
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(options.durable)) throw invalidArgument("durable", `"${options.durable}" must be 1–64 letters, digits, "-" or "_"`);
  const expires = options.pullExpiresMs ?? 30_000;
  if (expires < 1_000) throw invalidArgument("pullExpiresMs", "must be >= 1000 (nats.js)");
  const seen = new RecentIdSet(options.dedupCapacity ?? 100_000);
  for (const id of options.seenEventIds ?? []) seen.add(id);
  const signal = options.signal;

  return {
    async *[Symbol.asyncIterator]() {
      if (signal?.aborted === true) return;
      const jsm = await raceAbort(jetstreamManager(nc), signal);
      await ensureDurable(jsm, stream, options.durable, consumerConfig(options, eventFilterSubject(filter)), signal);
      const consumer = await raceAbort(jetstream(nc).consumers.get(stream, options.durable), signal);
      const messages = await consumer.consume({ max_messages: options.batchSize ?? 256, expires });
      const onAbort = (): void => {
        void messages.close();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      const it = messages[Symbol.asyncIterator]();
      let current: JsMsg | undefined;
      try {
        for (;;) {
          const next = await it.next();
          if (next.done === true) break;
          const m = next.value;
          if (isAborted(signal)) {
            m.nak();
            break;
          }
          let event: Event;
          try {
            event = decodeEvent(m.data);
          } catch (err) {
            options.onInvalid?.({ streamSequence: m.seq, subject: m.subject, error: WardenError.from(err, Code.InvalidArgument) });
            m.term("not a warden event");
            continue;
          }
          if (!matchesEventFilter(event, filter) || seen.has(event.id)) {
            m.ack();
            continue;
          }
          current = m;
          yield { event, type: eventTypeOf(event), subject: m.subject, streamSequence: m.seq, redelivered: m.redelivered };
          // Resumed: the reader is done with it.
          current = undefined;
          seen.add(event.id);
          m.ack();
        }
      } finally {
        signal?.removeEventListener("abort", onAbort);
        // The reader left mid-event (break or throw): whether it was handled is
        // unknown, so hand it back now rather than after ack_wait, together with
        // what the client had already buffered; the next reader of this durable
        // gets them at once (and skips ids it was told it has seen).
        current?.nak();
        void messages.close();
        try {
          for (;;) {
            const rest = await it.next();
            if (rest.done === true) break;
            rest.value.nak();
          }
        } catch {
          // The iterator already failed (e.g. the consumer was deleted): the
          // error that ended the loop is the one the reader sees; unacked
          // messages come back after ack_wait anyway.
        }
      }
    },
  };
}

/**
 * The provisioning step for a reader: creates its durable consumer with the
 * configuration `subscribeAuditEvents` would create (same filter, acks, start),
 * so the reader's NATS user needs no right to create or change consumers.
 * An existing durable is left as it is (FAILED_PRECONDITION if its filter
 * differs). Returns whether it was created.
 */
export async function provisionAuditDurable(
  nc: NatsConnection,
  options: Pick<AuditSubscribeOptions, "durable" | "stream" | "filter" | "start" | "ackWaitMs">,
  signal?: AbortSignal,
): Promise<"created" | "exists"> {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(options.durable)) throw invalidArgument("durable", `"${options.durable}" must be 1–64 letters, digits, "-" or "_"`);
  const stream = options.stream ?? defaultAuditStreamName;
  const jsm = await raceAbort(jetstreamManager(nc), signal);
  return ensureDurable(jsm, stream, options.durable, consumerConfig(options, eventFilterSubject(options.filter ?? {})), signal);
}

function consumerConfig(options: Pick<AuditSubscribeOptions, "durable" | "start" | "ackWaitMs">, filterSubject: string): Partial<ConsumerConfig> {
  const start = options.start ?? { kind: "all" };
  const base: Partial<ConsumerConfig> = {
    durable_name: options.durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(options.ackWaitMs ?? 30_000),
    filter_subject: filterSubject,
    max_ack_pending: 1_000,
  };
  switch (start.kind) {
    case "all":
      return { ...base, deliver_policy: DeliverPolicy.All };
    case "new":
      return { ...base, deliver_policy: DeliverPolicy.New };
    case "time":
      if (Number.isNaN(start.at.getTime())) throw invalidArgument("start.at", "invalid date");
      return { ...base, deliver_policy: DeliverPolicy.StartTime, opt_start_time: start.at.toISOString() };
    case "sequence":
      if (!Number.isInteger(start.streamSequence) || start.streamSequence < 1) throw invalidArgument("start.streamSequence", "must be an integer >= 1");
      return { ...base, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start.streamSequence };
  }
}

async function ensureDurable(jsm: JetStreamManager, stream: string, durable: string, config: Partial<ConsumerConfig>, signal: AbortSignal | undefined): Promise<"created" | "exists"> {
  try {
    const info = await raceAbort(jsm.consumers.info(stream, durable), signal);
    if (info.config.filter_subject !== config.filter_subject) {
      // nats-server 2.9 cannot change a durable's filter; a silent new filter
      // would also skip or repeat events. The operator picks a new name instead.
      throw new WardenError(
        Code.FailedPrecondition,
        `durable "${durable}" filters "${info.config.filter_subject ?? ""}", not "${config.filter_subject ?? ""}"; use another durable name or delete it`,
      );
    }
    return "exists";
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
  }
  await raceAbort(jsm.consumers.add(stream, config), signal);
  return "created";
}

// A function, so the compiler does not narrow `aborted` across the yield.
function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}
