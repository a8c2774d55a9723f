import type { Event } from "@warden/proto";
import { Code, WardenError, abortReason } from "@warden/common";
import { createFencedPublisher, type AuditStreamHead, type ChainCondition, type Publisher, type PublishAck } from "@warden/outbox";
import type { EventQueue } from "../kernel/event-queue.js";
import type { SimRandom } from "../kernel/sim-random.js";
import type { VirtualClock } from "../kernel/virtual-clock.js";
import type { Coverage } from "../check/coverage.js";

/** HA: how one generation's publishes are fenced and flushed (the production `createFencedPublisher` runs over this stream). */
export interface SimPublishFence {
  /** The lease epoch held at this moment (the runner's gate), undefined while not held. */
  readonly writerEpoch: () => bigint | undefined;
  /**
   * Runs the client's flush of a publish already handed to it: on the
   * generation's scoped clock, so a process stopped (SIGSTOP) before the
   * flush sends the bytes only when it resumes, and a dead one never.
   */
  readonly flush: (delayMs: number, fn: () => void) => void;
}

/**
 * A simulated JetStream stream for the audit subject: publishes with
 * `Nats-Msg-Id` de-duplicated inside the stream's duplicate window (2 min in production; compressed in short runs), outages (publish fails
 * UNAVAILABLE), and lost PubAcks (stored, but the publisher times out and
 * retries). `stored` is what a consumer reads, copies included. HA: publishes
 * conditional on the last message (expected last sequence / msg id, checked
 * after de-duplication, as nats-server does) and the stream's head read back.
 */
export class SimJetStream {
  readonly stored: Event[] = [];
  private readonly seenAtMs = new Map<string, number>();
  downUntilMs = 0;
  ackLossP = 0;
  private readyListeners = new Set<() => void>();
  /** The last stored message's id and the epoch its writer stamped (0: unfenced). */
  private last: { id: string; writerEpoch: bigint } | undefined;
  /** Flush delays and head reads draw here, so the streams other parts draw from are unchanged. */
  private fenceRng: SimRandom | undefined;

  constructor(
    private readonly queue: EventQueue,
    private readonly clock: VirtualClock,
    private readonly rng: SimRandom,
    private readonly coverage: Coverage,
    /** The stream's `duplicate_window`. */
    readonly dupWindowMs: number,
  ) {}

  outage(untilMs: number): void {
    this.downUntilMs = Math.max(this.downUntilMs, untilMs);
    this.queue.push(untilMs, "nats.up", () => {
      if (this.clock.now() < this.downUntilMs) return;
      for (const l of [...this.readyListeners]) l();
    });
  }

  /**
   * HA profile: an event stored (not a copy) from a publisher whose generation
   * leads with `publisherEpoch` (ground truth for the HA checkers).
   */
  onStored: ((event: Event, publisherEpoch: bigint) => void) | undefined;

  /** A publisher for one coordinator generation (`alive` false once it crashed; `leaderEpoch`: the HA generation's epoch). */
  publisher(alive: () => boolean, leaderEpoch?: bigint, fence?: SimPublishFence): Publisher {
    if (fence !== undefined) {
      const rng = (this.fenceRng ??= this.rng.fork("audit-fence"));
      const raw = this.rawPublisher(alive, leaderEpoch, fence);
      return {
        ...createFencedPublisher({
          writerEpoch: fence.writerEpoch,
          port: {
            readHead: (signal) =>
              new Promise<AuditStreamHead | undefined>((resolve, reject) => {
                this.queue.push(this.clock.now() + 1 + rng.next() * 5, "nats.read-head", () => {
                  if (!alive() || signal.aborted) return;
                  if (this.clock.now() < this.downUntilMs) {
                    reject(new WardenError(Code.Unavailable, "nats: no connection"));
                    return;
                  }
                  resolve(this.last === undefined ? undefined : { seq: this.stored.length, msgId: this.last.id, writerEpoch: this.last.writerEpoch });
                });
              }),
            send: (event, condition, signal) => raw.send(event, signal, condition),
          },
        }),
        onReady: raw.onReady,
      };
    }
    const raw = this.rawPublisher(alive, leaderEpoch, undefined);
    return { publish: (event, signal) => raw.send(event, signal, undefined), onReady: raw.onReady };
  }

  private rawPublisher(alive: () => boolean, leaderEpoch: bigint | undefined, fence: SimPublishFence | undefined): { send(event: Event, signal: AbortSignal, condition: ChainCondition | undefined): Promise<PublishAck>; onReady: NonNullable<Publisher["onReady"]> } {
    const rng = this.fenceRng;
    /** Fenced (HA): one connection, so its publishes reach the server in the order they were flushed (TCP). */
    let lastArrivalMs = 0;
    let lastFlushMs = 0;
    return {
      // Like the real publisher (packages/audit nats-publisher.ts) the signal is
      // checked, not raced: a listener per publish would pile up on the outbox's
      // one close signal; the ack timeout bounds the wait.
      send: (event, signal, condition) =>
        new Promise<PublishAck>((resolve, reject) => {
          if (signal.aborted) {
            reject(abortReason(signal));
            return;
          }
          const d = 1 + this.rng.next() * 20;
          const deliver = (): void => {
            if (!alive() || signal.aborted) return;
            if (this.clock.now() < this.downUntilMs) {
              reject(new WardenError(Code.Unavailable, "nats: no connection"));
              return;
            }
            const refusal = this.refusal(event, condition);
            if (refusal !== undefined) {
              reject(refusal);
              return;
            }
            const ack = this.store(event, condition?.writerEpoch ?? 0n);
            if (!ack.duplicate && leaderEpoch !== undefined) this.onStored?.(event, leaderEpoch);
            if (this.rng.chance(this.ackLossP)) {
              this.coverage.hit("nats.ack-lost");
              this.queue.push(this.clock.now() + 5_000, "nats.ack-timeout", () => {
                if (alive() && !signal.aborted) reject(new WardenError(Code.DeadlineExceeded, "nats: PubAck timeout"));
              });
              return;
            }
            resolve(ack);
          };
          if (fence === undefined || rng === undefined) {
            this.queue.push(this.clock.now() + d, "nats.publish", deliver);
            return;
          }
          // Handed to the client now; its flush runs on the process's clock (a stopped process flushes when it resumes).
          // Mostly within the event loop's next turns; sometimes late (a socket not writable, a stalled loop), which
          // widens the window in which a stop (SIGSTOP) catches a publish handed over but not yet flushed.
          // One client buffer: flushed in the order handed over.
          const flushAtMs = Math.max(this.clock.now() + (rng.chance(0.05) ? rng.next() * 3_000 : rng.next() * 20), lastFlushMs);
          lastFlushMs = flushAtMs;
          fence.flush(flushAtMs - this.clock.now(), () => {
            if (this.clock.now() > flushAtMs + 1) this.coverage.hit("nats.publish-flushed-after-pause");
            lastArrivalMs = Math.max(this.clock.now() + d, lastArrivalMs + 0.001);
            this.queue.push(lastArrivalMs, "nats.publish", deliver);
          });
        }),
      onReady: (listener) => {
        const l = (): void => {
          if (alive()) listener();
        };
        this.readyListeners.add(l);
        return () => this.readyListeners.delete(l);
      },
    };
  }

  /** nats-server's order: a duplicate id is acknowledged before any condition is looked at. */
  private refusal(event: Event, condition: ChainCondition | undefined): WardenError | undefined {
    if (condition === undefined || this.isDuplicate(event)) return undefined;
    if ("expectLastMsgId" in condition && condition.expectLastMsgId !== this.last?.id) {
      this.coverage.hit("nats.wrong-last-msg-id");
      return new WardenError(Code.Unavailable, `JetStream refused the event: wrong last msg ID: ${this.last?.id ?? ""} (10070)`);
    }
    // Sequence 0 is not checked (nats-server 2.9).
    if ("expectLastSeq" in condition && condition.expectLastSeq > 0 && condition.expectLastSeq !== this.stored.length) {
      this.coverage.hit("nats.wrong-last-sequence");
      return new WardenError(Code.Unavailable, `JetStream refused the event: wrong last sequence: ${String(this.stored.length)} (10071)`);
    }
    return undefined;
  }

  private isDuplicate(event: Event): boolean {
    const seen = this.seenAtMs.get(event.id);
    return seen !== undefined && this.clock.now() - seen <= this.dupWindowMs;
  }

  private store(event: Event, writerEpoch: bigint): PublishAck {
    const now = this.clock.now();
    const seen = this.seenAtMs.get(event.id);
    if (seen !== undefined && now - seen <= this.dupWindowMs) {
      this.coverage.hit("nats.duplicate-ack");
      return { duplicate: true };
    }
    if (seen !== undefined) this.coverage.hit("nats.dup-window-expired");
    this.seenAtMs.set(event.id, now);
    this.last = { id: event.id, writerEpoch };
    this.stored.push(event);
    return { duplicate: false, streamSequence: this.stored.length };
  }
}
