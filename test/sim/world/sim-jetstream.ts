import type { Event } from "@warden/proto";
import { Code, WardenError, abortReason } from "@warden/common";
import type { Publisher, PublishAck } from "@warden/outbox";
import type { EventQueue } from "../kernel/event-queue.js";
import type { SimRandom } from "../kernel/sim-random.js";
import type { VirtualClock } from "../kernel/virtual-clock.js";
import type { Coverage } from "../check/coverage.js";

/**
 * A simulated JetStream stream for the audit subject: publishes with
 * `Nats-Msg-Id` de-duplicated inside the stream's duplicate window (2 min in production; compressed in short runs), outages (publish fails
 * UNAVAILABLE), and lost PubAcks (stored, but the publisher times out and
 * retries). `stored` is what a consumer reads, copies included.
 */
export class SimJetStream {
  readonly stored: Event[] = [];
  private readonly seenAtMs = new Map<string, number>();
  downUntilMs = 0;
  ackLossP = 0;
  private readyListeners = new Set<() => void>();

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
  publisher(alive: () => boolean, leaderEpoch?: bigint): Publisher {
    return {
      // Like the real publisher (packages/audit nats-publisher.ts) the signal is
      // checked, not raced: a listener per publish would pile up on the outbox's
      // one close signal; the ack timeout bounds the wait.
      publish: (event, signal) =>
        new Promise<PublishAck>((resolve, reject) => {
          if (signal.aborted) {
            reject(abortReason(signal));
            return;
          }
          const d = 1 + this.rng.next() * 20;
          this.queue.push(this.clock.now() + d, "nats.publish", () => {
            if (!alive() || signal.aborted) return;
            if (this.clock.now() < this.downUntilMs) {
              reject(new WardenError(Code.Unavailable, "nats: no connection"));
              return;
            }
            const ack = this.store(event);
            if (!ack.duplicate && leaderEpoch !== undefined) this.onStored?.(event, leaderEpoch);
            if (this.rng.chance(this.ackLossP)) {
              this.coverage.hit("nats.ack-lost");
              this.queue.push(this.clock.now() + 5_000, "nats.ack-timeout", () => {
                if (alive() && !signal.aborted) reject(new WardenError(Code.DeadlineExceeded, "nats: PubAck timeout"));
              });
              return;
            }
            resolve(ack);
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

  private store(event: Event): PublishAck {
    const now = this.clock.now();
    const seen = this.seenAtMs.get(event.id);
    if (seen !== undefined && now - seen <= this.dupWindowMs) {
      this.coverage.hit("nats.duplicate-ack");
      return { duplicate: true };
    }
    if (seen !== undefined) this.coverage.hit("nats.dup-window-expired");
    this.seenAtMs.set(event.id, now);
    this.stored.push(event);
    return { duplicate: false, streamSequence: this.stored.length };
  }
}
