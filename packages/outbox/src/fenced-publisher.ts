import type { Event } from "@warden/proto";
import { Code, WardenError, isPlanted } from "@warden/common";
import type { PublishAck, Publisher } from "./publisher-port.js";

/** The audit stream's last message, as read from its leader. */
export interface AuditStreamHead {
  /** Its stream sequence (> 0). */
  readonly seq: number;
  /** Its `Nats-Msg-Id` (the event id), when it has one and could be read. */
  readonly msgId?: string;
  /** The lease epoch its writer held (header `Warden-Epoch`); 0 when it carries none. */
  readonly writerEpoch: bigint;
}

/**
 * The condition a fenced publish is stored under: the stream refuses it
 * unless its last message is the one named. `expectLastSeq` 0 names an empty
 * stream (nats-server 2.9 does not check it: the very first publish into a
 * never-written stream is unconditional).
 */
export type ChainCondition = { readonly writerEpoch: bigint } & ({ readonly expectLastSeq: number } | { readonly expectLastMsgId: string } | { readonly unconditional: true });

/** The transport under a fenced publisher (JetStream in production, the simulated stream in test/sim). */
export interface FencedStreamPort {
  /** The stream's last message; undefined for a stream never written. */
  readHead(signal: AbortSignal): Promise<AuditStreamHead | undefined>;
  /** Publishes `event` under `condition` (and the writer epoch as a header); rejects on a refusal. */
  send(event: Event, condition: ChainCondition, signal: AbortSignal): Promise<PublishAck>;
}

export interface FencedPublisherOptions {
  readonly port: FencedStreamPort;
  /** The lease epoch held at this moment, undefined while not held (then nothing is sent). */
  readonly writerEpoch: () => bigint | undefined;
  /** Called when the stream's last message was written under a newer epoch than this writer's. */
  readonly onSuperseded?: (newer: bigint, mine: bigint) => void;
}

export interface FencedPublisher extends Publisher {
  /** Rejects what waits and every later publish. */
  close(): void;
}

interface Waiter {
  readonly event: Event;
  readonly signal: AbortSignal;
  readonly resolve: (ack: PublishAck) => void;
  readonly reject: (err: unknown) => void;
}

/** Where the chain is: unknown until the head was read (at start and after any failure). */
type ChainState = { readonly t: "unknown" } | { readonly t: "reading" } | { readonly t: "chained"; last: { readonly seq: number } | { readonly id: string } } | { readonly t: "closed" };

/**
 * A Publisher whose every publish is conditional on the stream's last
 * message (HA): the first after reading the stream's head expects its
 * sequence, every later one the event id sent before it
 * (`Nats-Expected-Last-Msg-Id`). While this writer leads it is the only
 * writer of the stream, so its chain holds; a newer leader reads the head
 * at its first publish and chains behind it, after which no publish stamped
 * by the older writer can match the stream's last message: one an ex-leader
 * handed to the client before a pause and flushed after it is refused
 * instead of landing after the newer leader's events.
 *
 * After any failure nothing is sent until every publish in flight has
 * settled; then the head is read again and the waiting publishes go out in
 * the order they were asked for, behind it. A head written under a newer
 * epoch refuses them (FAILED_PRECONDITION) and reports `onSuperseded`; a
 * re-sent event that was in fact stored is answered by JetStream's
 * `Nats-Msg-Id` de-duplication (checked before the condition), and one the
 * head proves stored is acknowledged without sending.
 *
 * Pure over its port: no timers, no clock; the bounds are the port's.
 */
export function createFencedPublisher(options: FencedPublisherOptions): FencedPublisher {
  const { port } = options;
  let state: ChainState = { t: "unknown" };
  let inFlight = 0;
  const waiting: Waiter[] = [];
  /** Ids sent since the last head read and not acknowledged, in send order (bounded by what the outbox has in flight and queued for retry). */
  const unsettled = new Map<string, true>();
  /** Ids the last head read proved stored, acknowledged without sending when asked again. */
  let provenStored = new Set<string>();
  const closeCtl = new AbortController();

  const refuseAll = (err: unknown): void => {
    for (const w of waiting.splice(0)) w.reject(err);
  };

  const send = (w: Waiter, chain: Extract<ChainState, { t: "chained" }>): void => {
    if (w.signal.aborted) {
      w.reject(w.signal.reason);
      return;
    }
    if (provenStored.delete(w.event.id)) {
      w.resolve({ duplicate: true });
      return;
    }
    const epoch = options.writerEpoch();
    if (epoch === undefined) {
      w.reject(new WardenError(Code.Unavailable, "audit publish refused: this coordinator does not hold the lease"));
      return;
    }
    // Planted bug "audit-publish-unfenced": no condition, so a resumed ex-leader's publish is stored wherever it lands.
    const condition: ChainCondition = isPlanted("audit-publish-unfenced") ? { writerEpoch: epoch, unconditional: true } : "id" in chain.last ? { writerEpoch: epoch, expectLastMsgId: chain.last.id } : { writerEpoch: epoch, expectLastSeq: chain.last.seq };
    chain.last = { id: w.event.id };
    unsettled.delete(w.event.id);
    unsettled.set(w.event.id, true);
    inFlight++;
    let sent: Promise<PublishAck>;
    try {
      sent = port.send(w.event, condition, w.signal);
    } catch (err) {
      sent = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    sent.then(
      (ack) => {
        inFlight--;
        unsettled.delete(w.event.id);
        w.resolve(ack);
        readIfDue();
      },
      (err: unknown) => {
        inFlight--;
        // The chain may have a gap now: everything after waits for a fresh head.
        if (state.t === "chained") state = { t: "unknown" };
        w.reject(err);
        readIfDue();
      },
    );
  };

  const readIfDue = (): void => {
    if (state.t !== "unknown" || inFlight > 0 || waiting.length === 0) return;
    state = { t: "reading" };
    port.readHead(closeCtl.signal).then(
      (head) => {
        if (state.t !== "reading") return; // closed meanwhile
        const mine = options.writerEpoch();
        if (head !== undefined && mine !== undefined && head.writerEpoch > mine) {
          state = { t: "unknown" };
          options.onSuperseded?.(head.writerEpoch, mine);
          unsettled.clear();
          refuseAll(new WardenError(Code.FailedPrecondition, `audit publish refused: the audit stream's last event was published under leader epoch ${String(head.writerEpoch)}, newer than this coordinator's ${String(mine)}`, { details: { field: "leader_epoch", reason: "stale-leader-epoch" } }));
          return;
        }
        // Sent by this writer and now the head: it and everything sent before it are stored (the chain admits only a prefix).
        provenStored = new Set();
        if (head?.msgId !== undefined && mine !== undefined && head.writerEpoch === mine && unsettled.has(head.msgId)) {
          for (const id of unsettled.keys()) {
            provenStored.add(id);
            if (id === head.msgId) break;
          }
        }
        unsettled.clear();
        const chain: Extract<ChainState, { t: "chained" }> = { t: "chained", last: head?.msgId !== undefined ? { id: head.msgId } : { seq: head?.seq ?? 0 } };
        state = chain;
        // In the order they were asked for; a failure among them turns the state to unknown, and the rest wait again.
        while (waiting.length > 0 && state === chain) {
          const w = waiting.shift();
          if (w !== undefined) send(w, chain);
        }
        readIfDue();
      },
      (err: unknown) => {
        if (state.t !== "reading") return;
        state = { t: "unknown" };
        refuseAll(WardenError.from(err, Code.Unavailable));
      },
    );
  };

  return {
    publish(event, signal) {
      return new Promise<PublishAck>((resolve, reject) => {
        const w: Waiter = { event, signal, resolve, reject };
        if (state.t === "closed") {
          reject(new WardenError(Code.Unavailable, "publisher closed"));
          return;
        }
        if (state.t === "chained" && waiting.length === 0) {
          send(w, state);
          return;
        }
        waiting.push(w);
        readIfDue();
      });
    },
    close() {
      state = { t: "closed" };
      closeCtl.abort(new WardenError(Code.Canceled, "publisher closed"));
      refuseAll(new WardenError(Code.Unavailable, "publisher closed"));
    },
  };
}
