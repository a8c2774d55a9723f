import { createInbox, headers, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { Code, WardenError, abortReason } from "@warden/common";
import { encodeEvent, subjectForEvent } from "@warden/events";
import { createFencedPublisher, type ChainCondition, type PublishAck, type Publisher } from "@warden/outbox";
import type { Event } from "@warden/proto";
import { defaultAuditStreamName } from "./audit-stream.js";
import { inboxPrefixOf } from "./nats-connection.js";
import { readAuditStreamHead, writerEpochHeader } from "./audit-stream-head.js";

export interface NatsPublisherOptions {
  /** How long to wait for a PubAck before the outbox retries. @default 5000 */
  readonly ackTimeoutMs?: number;
  /** The stream that must store the event (an ack from another stream is an error). @default "WARDEN_EVENTS" */
  readonly streamName?: string;
  /** Prefix of the reply subjects acks come back on. @default the `inboxPrefix` the connection was opened with by `connectAudit`, else "_INBOX" */
  readonly inboxPrefix?: string;
  /** How often expired acks are swept. @default 100 */
  readonly sweepEveryMs?: number;
  /**
   * Called when a publish was answered "no responders" (503): no stream
   * listens on the event subjects, e.g. the server restarted without its
   * store. The audit link uses it to ensure the stream again.
   */
  readonly onNoStream?: () => void;
  /**
   * HA: every publish is conditional on the stream's last message (see
   * `createFencedPublisher` in @warden/outbox) and carries the writer's lease
   * epoch (header `Warden-Epoch`), so a publish an ex-leader flushes after a
   * pause is refused once a newer leader has published. Absent: unconditional
   * publishes (a single coordinator is the stream's only writer).
   */
  readonly fence?: {
    /** The lease epoch held at this moment, undefined while not held. */
    readonly writerEpoch: () => bigint | undefined;
    readonly onSuperseded?: (newer: bigint, mine: bigint) => void;
  };
}

/** The JetStream publisher: the outbox's port, plus close (fails what is pending and every later publish). */
export interface NatsPublisher extends Publisher {
  onReady(listener: () => void): () => void;
  close(): void;
}

interface PendingAck {
  readonly resolve: (ack: PublishAck) => void;
  readonly reject: (err: WardenError) => void;
  readonly expiresAtMs: number;
}

/** The JSON a JetStream PubAck carries (or its error). */
interface PubAckJson {
  stream?: string;
  seq?: number;
  duplicate?: boolean;
  error?: { code?: number; err_code?: number; description?: string };
}

const decoder = new TextDecoder();

/**
 * The outbox's Publisher on JetStream: protobuf payload on
 * `warden.events.<type>.<node>.<model>`, `Nats-Msg-Id` = event id (so a retry
 * within the stream's duplicate window is acknowledged as `duplicate` and not
 * stored twice).
 *
 * Acks come back on one wildcard subscription and are matched by a counter in
 * the reply subject, and one sweep expires overdue acks: with hundreds of
 * publishes in flight this avoids the per-request timer, inbox bookkeeping and
 * error object of a request/reply call each (measured: the largest single cost
 * of `jetstream().publish` pipelined). Reconnection is the connection's
 * business (`connectAudit` reconnects forever); while it is down acks time out
 * and the outbox retries them with the same id.
 */
export function createNatsPublisher(nc: NatsConnection, options: NatsPublisherOptions = {}): NatsPublisher {
  const timeoutMs = options.ackTimeoutMs ?? 5_000;
  const streamName = options.streamName ?? defaultAuditStreamName;
  const prefix = `${createInbox(options.inboxPrefix ?? inboxPrefixOf(nc))}.`;
  // Insertion order is expiry order (one timeout for all), so the sweep stops at the first live entry.
  const pending = new Map<number, PendingAck>();
  let next = 0;
  let sub: Subscription | undefined;
  // Once closed, publish refuses: a late publish would subscribe again and write on a connection being closed.
  let closed = false;
  let sweeper: NodeJS.Timeout | undefined;

  const settle = (msg: Msg): void => {
    const id = Number(msg.subject.slice(prefix.length));
    const p = pending.get(id);
    if (p === undefined) return; // expired already: the outbox has retried it
    pending.delete(id);
    const h = msg.headers;
    if (h !== undefined && h.code >= 300) {
      if (h.code === 503) options.onNoStream?.();
      p.reject(new WardenError(h.code === 503 ? Code.Unavailable : Code.Internal, h.code === 503 ? `no stream listens on the event subjects (NATS ${String(h.code)})` : `NATS ${String(h.code)} ${h.description}`));
      return;
    }
    let ack: PubAckJson;
    try {
      ack = JSON.parse(decoder.decode(msg.data)) as PubAckJson;
    } catch {
      p.reject(new WardenError(Code.Internal, "unreadable JetStream ack"));
      return;
    }
    if (ack.error !== undefined) {
      p.reject(new WardenError(Code.Unavailable, `JetStream refused the event: ${ack.error.description ?? "unknown error"} (${String(ack.error.err_code ?? ack.error.code ?? "")})`));
      return;
    }
    if (ack.stream !== streamName) {
      p.reject(new WardenError(Code.FailedPrecondition, `the event was stored by stream "${ack.stream ?? ""}", not "${streamName}": check the streams' subjects`));
      return;
    }
    p.resolve({ duplicate: ack.duplicate === true, ...(ack.seq === undefined ? {} : { streamSequence: ack.seq }) });
  };

  const sweep = (): void => {
    const now = Date.now();
    for (const [id, p] of pending) {
      if (p.expiresAtMs > now) break;
      pending.delete(id);
      p.reject(new WardenError(Code.DeadlineExceeded, `no JetStream ack within ${String(timeoutMs)} ms`));
    }
    if (pending.size === 0 && sweeper !== undefined) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  };

  const failAll = (why: string): void => {
    if (sweeper !== undefined) clearInterval(sweeper);
    sweeper = undefined;
    for (const p of pending.values()) p.reject(new WardenError(Code.Unavailable, why));
    pending.clear();
  };

  const ensureSubscribed = (): void => {
    if (sub !== undefined && !sub.isClosed()) return;
    sub = nc.subscribe(`${prefix}*`, {
      callback: (err, msg) => {
        if (err === null) settle(msg);
      },
    });
  };

  // Reconnects wake the outbox out of its back-off (Publisher.onReady).
  const readyListeners = new Set<() => void>();
  const watchStatus = async (): Promise<void> => {
    for await (const st of nc.status()) {
      if (st.type !== "reconnect") continue;
      // Acks outstanding across a reconnect may never come (the publish or its
      // ack died with the old socket): fail them now rather than at their
      // timeout; the outbox re-sends them under the same Nats-Msg-Id, so one
      // that did arrive is acknowledged as a duplicate, not stored twice.
      for (const p of pending.values()) p.reject(new WardenError(Code.Unavailable, "NATS reconnected before the ack arrived"));
      pending.clear();
      // After the rejections have been handled, so the outbox's wake-up is the last word.
      setImmediate(() => {
        for (const l of readyListeners) l();
      });
    }
    // The connection is closed for good: nothing pending can be acknowledged any more.
    failAll("nats connection closed");
  };

  // The iterator ends when the connection closes.
  void watchStatus().catch(() => undefined);

  /** One publish: the stream must store it (with `condition`, only behind the message it names). */
  const send = (event: Event, condition: ChainCondition | undefined, signal: AbortSignal): Promise<PublishAck> => {
    // The signal is checked, not raced: with hundreds of publishes in flight a
    // listener each would pile up on the outbox's one close signal, and the
    // ack timeout bounds the wait (the outbox ignores late results after close).
    if (signal.aborted) return Promise.reject(abortReason(signal));
    if (closed) return Promise.reject(new WardenError(Code.Unavailable, "publisher closed"));
    if (nc.isClosed()) return Promise.reject(new WardenError(Code.Unavailable, "nats connection closed"));
    ensureSubscribed();
    const id = next++;
    const h = headers();
    h.set("Nats-Msg-Id", event.id);
    if (condition !== undefined) {
      h.set(writerEpochHeader, String(condition.writerEpoch));
      if ("expectLastMsgId" in condition) h.set("Nats-Expected-Last-Msg-Id", condition.expectLastMsgId);
      // 0 (a never-written stream) is not checked by nats-server 2.9; sent anyway for servers that do.
      else if ("expectLastSeq" in condition) h.set("Nats-Expected-Last-Sequence", String(condition.expectLastSeq));
    }
    return new Promise<PublishAck>((resolve, reject) => {
      pending.set(id, { resolve, reject, expiresAtMs: Date.now() + timeoutMs });
      // Unref'd: pending acks are promises, not a reason to keep the process alive.
      sweeper ??= setInterval(sweep, options.sweepEveryMs ?? 100).unref();
      try {
        nc.publish(subjectForEvent(event), encodeEvent(event), { reply: `${prefix}${String(id)}`, headers: h });
      } catch (err) {
        pending.delete(id);
        reject(new WardenError(Code.Unavailable, `cannot publish: ${err instanceof Error ? err.message : String(err)}`, { cause: err }));
      }
    });
  };

  const fenced = options.fence === undefined ? undefined : createFencedPublisher({
    writerEpoch: options.fence.writerEpoch,
    ...(options.fence.onSuperseded === undefined ? {} : { onSuperseded: options.fence.onSuperseded }),
    port: {
      readHead: (signal) => readAuditStreamHead(nc, streamName, timeoutMs, signal),
      send: (event, condition, signal) => send(event, condition, signal),
    },
  });

  return {
    onReady(listener: () => void): () => void {
      readyListeners.add(listener);
      return () => {
        readyListeners.delete(listener);
      };
    },
    publish(event: Event, signal: AbortSignal): Promise<PublishAck> {
      return fenced === undefined ? send(event, undefined, signal) : fenced.publish(event, signal);
    },
    close() {
      closed = true;
      readyListeners.clear();
      fenced?.close();
      sub?.unsubscribe();
      failAll("publisher closed");
    },
  };
}
