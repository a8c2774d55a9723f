import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { EventSchema, EventSequenceSchema, type Event } from "@warden/proto";
import { invalidArgument, type Clock } from "@warden/common";

/** What the caller says about an event; the factory adds id, time and sequence. */
export interface EventInit {
  readonly nodeId?: string;
  readonly model?: string;
  readonly address?: string;
  /** Empty or absent for events that belong to no instance (node.*, policy.*). */
  readonly incarnation?: string;
  /** Who asked (an Admin API principal); absent for the coordinator's own decisions. */
  readonly actor?: string;
  readonly payload: Exclude<Event["payload"], { case: undefined }>;
}

export interface EventFactoryOptions {
  /** Wall time for the `time` field. */
  readonly clock: Pick<Clock, "wallNow">;
  /** Unique ids, normally `createUlidFactory(clock, rng)`; the id is also the `Nats-Msg-Id`. */
  readonly newId: () => string;
  /**
   * This coordinator incarnation's epoch; must grow across restarts so that
   * `(epoch, n)` orders an instance's events across them.
   */
  readonly epoch: bigint;
  /** The HA term's lease epoch, stamped as `leader_epoch` on every event. @default 0 (no HA) */
  readonly leaderEpoch?: bigint;
  /**
   * How many incarnations keep a live counter. The least recently used beyond it
   * are forgotten (a later event for one would restart at n = 1), so memory stays
   * bounded whatever the history. @default 200000
   */
  readonly maxTrackedIncarnations?: number;
}

/**
 * Stamps events. Not thread-shared state in the JS sense, but one instance per
 * coordinator incarnation: two factories with the same epoch would hand out the
 * same `(epoch, n)` pairs.
 */
export interface EventFactory {
  readonly epoch: bigint;
  /** A new event with a fresh id, the current wall time and the next sequence of its incarnation. */
  create(init: EventInit): Event;
}

/**
 * Creates the coordinator's event factory. Sequence numbers start at 1 per
 * incarnation in each epoch; events without an incarnation get `n = 0`
 * (they have no per-instance order).
 */
export function createEventFactory(options: EventFactoryOptions): EventFactory {
  const { clock, newId, epoch } = options;
  const leaderEpoch = options.leaderEpoch ?? 0n;
  if (leaderEpoch < 0n) throw invalidArgument("leaderEpoch", "must be >= 0");
  const cap = options.maxTrackedIncarnations ?? 200_000;
  if (!(cap >= 1)) throw invalidArgument("maxTrackedIncarnations", `must be >= 1, got ${String(cap)}`);
  if (epoch < 0n) throw invalidArgument("epoch", "must be >= 0");
  // Map iteration order is insertion order: deleting and re-inserting on use
  // makes the first key the least recently used one.
  const counters = new Map<string, bigint>();
  const next = (incarnation: string): bigint => {
    if (incarnation === "") return 0n;
    const n = (counters.get(incarnation) ?? 0n) + 1n;
    counters.delete(incarnation);
    counters.set(incarnation, n);
    if (counters.size > cap) {
      const oldest = counters.keys().next();
      if (oldest.done !== true) counters.delete(oldest.value);
    }
    return n;
  };
  return {
    epoch,
    create(init) {
      const incarnation = init.incarnation ?? "";
      return create(EventSchema, {
        id: newId(),
        time: timestampFromMs(Math.floor(clock.wallNow())),
        nodeId: init.nodeId ?? "",
        model: init.model ?? "",
        address: init.address ?? "",
        incarnation,
        sequence: create(EventSequenceSchema, { epoch, n: next(incarnation) }),
        actor: init.actor ?? "",
        payload: init.payload,
        leaderEpoch,
      });
    },
  };
}
