import type { Event } from "@warden/proto";
import { create } from "@bufbuild/protobuf";
import { RecoveredSchema } from "@warden/proto";
import {
  Code,
  WardenError,
  abortReason,
  backoffDelayMs,
  invalidArgument,
  isPlanted,
  throwIfAborted,
  type BackoffPolicy,
  type Cancel,
  type Clock,
  type Rng,
} from "@warden/common";
import { createEventFactory, eventTypeOf, type EventFactory, type EventInit } from "@warden/events";
import type { Journal } from "./journal-port.js";
import type { StopIntent } from "./journal-record.js";
import type { Publisher } from "./publisher-port.js";
import { reduceJournal, unfinishedInstances } from "./reduce-journal.js";
import { EntryQueue } from "./entry-queue.js";
import { eventPriorityOf, type EventPriority } from "./event-priority.js";

/** `serving` unless the outbox is full (or recently overflowed) or the journal fails. */
export type OutboxHealth = { readonly status: "serving" } | { readonly status: "not-serving"; readonly reason: string };

/** Counters for metrics; monotonic except `depth`, `inFlight` and `openStopIntents`. */
export interface OutboxStats {
  /** Events accepted but not yet acknowledged by the stream (journaling, queued, in flight, awaiting retry). */
  readonly depth: number;
  readonly inFlight: number;
  readonly capacity: number;
  /** Events accepted since start (replayed ones included). */
  readonly appended: number;
  /** Events acknowledged by the stream since start (duplicates included). */
  readonly published: number;
  /** Acks that said the stream already had the id. */
  readonly duplicates: number;
  /**
   * Events lost because the outbox was full: refused at append, or displaced
   * (queued low-priority ones given up for a critical one). Never silent: also in health.
   */
  readonly dropped: number;
  /** Of `dropped`, the critical ones (refused while no low-priority event was left to displace). */
  readonly droppedCritical: number;
  /** Of `dropped`, queued low-priority events displaced by a critical one. */
  readonly displaced: number;
  /** Failed publish attempts that were scheduled again. */
  readonly retries: number;
  /** Failed journal writes of `published` marks (the events are re-sent after a restart). */
  readonly markErrors: number;
  readonly openStopIntents: number;
  readonly lastPublishError: string | undefined;
  readonly health: OutboxHealth;
}

/**
 * What `append` did with an event. `dropped` only when the outbox was full
 * (a low-priority event, or a critical one with no low-priority one queued to displace).
 */
export type AppendOutcome = "queued" | "dropped";

/** What start-up found in the journal. */
export interface OutboxRecovery {
  /** The epoch of this coordinator incarnation (stamped on every new event). */
  readonly epoch: bigint;
  /** Stop intents without a cleared record: adopt those instances as leftovers. */
  readonly openStopIntents: readonly StopIntent[];
  /** Journaled events not yet marked published, queued again with their original ids. */
  readonly requeued: number;
  /** The `recovered` events appended for instances whose last event was not terminal. */
  readonly recovered: readonly Event[];
  /**
   * The journaled `eviction.started` of every instance whose last event it was:
   * evictions the previous coordinator began and never settled (its stop's
   * outcome is unknown), whether or not their stop intent was recorded yet.
   */
  readonly unsettledEvictions: readonly Event[];
}

export interface OutboxOptions {
  readonly journal: Journal;
  /** `nullPublisher` when the coordinator has no NATS URL. */
  readonly publisher: Publisher;
  readonly clock: Clock;
  /** Jitter for retry backoff. */
  readonly rng: Rng;
  /** Event ids (ULIDs). */
  readonly newId: () => string;
  /**
   * Force the epoch. By default: max(highest journaled epoch + 1, wall ms), so
   * epochs grow across restarts even if the journal file was lost.
   */
  readonly epoch?: bigint;
  /** Unacknowledged events kept at most. @default 100000 (DESIGN §5) */
  readonly capacity?: number;
  /** Publishes awaiting their ack at once. @default 512 */
  readonly maxInFlight?: number;
  /**
   * Back-off between failed publish attempts. Only one probe publish is in
   * flight while failing, so a short cap costs little and drains sooner after
   * NATS returns. @default 100 ms × 2 up to 2 s, 20 % jitter
   */
  readonly retryBackoff?: BackoffPolicy;
  /** After an overflow, health returns to serving once depth ≤ capacity × this. @default 0.9 */
  readonly recoverBelowFraction?: number;
  /**
   * Which events give way when the outbox is full: a `low` one is refused, and
   * a `critical` one displaces the youngest queued `low` one (marked settled in
   * the journal, so it is not re-sent after a restart) before it is refused.
   * @default eventPriorityOf (orphan.*, node.*, foreign.* are low)
   */
  readonly priorityOf?: (event: Event) => EventPriority;
  /** Called on every health transition (map to the `audit` gRPC health service; log and alert). */
  readonly onHealthChange?: (health: OutboxHealth, stats: OutboxStats) => void;
}

/**
 * The audit outbox: every event is journaled (fsync'd) before it is queued, and
 * queued events are published with many acks in flight and retried with back-off
 * until acknowledged, so a NATS outage loses nothing until the outbox is full and
 * a crash loses nothing at all (start-up replays the journal). Also the owner of
 * the loader's stop intents, which share the journal.
 *
 * Lifecycle: `new` → `start()` → `running` → `drain()`/`close()` → `closed`.
 * Calls other than `stats`/`health` before `start` or after `close` throw
 * FAILED_PRECONDITION naming the state.
 */
export interface Outbox {
  start(signal?: AbortSignal): Promise<OutboxRecovery>;
  /** Stamps id, time and sequence (available after `start`). */
  readonly events: EventFactory;
  /**
   * Journals `event` durably, then queues it for publishing. When the outbox
   * is full, a critical event takes the place of the youngest queued
   * low-priority one; otherwise the event resolves `dropped` (after counting it
   * and reporting not-serving), so an audit backlog never blocks an eviction
   * and a flood of peer reports never costs one. Rejects if the journal write fails.
   */
  append(event: Event, signal?: AbortSignal): Promise<AppendOutcome>;
  /** `events.create(init)` then `append`. */
  emit(init: EventInit, signal?: AbortSignal): Promise<{ event: Event; outcome: AppendOutcome }>;
  /** Journals a stop intent durably (DESIGN §3.3 step 4); resolves once fsync'd. */
  recordStopIntent(intent: Omit<StopIntent, "recordedAtMs"> & { recordedAtMs?: number }, signal?: AbortSignal): Promise<void>;
  /** Journals that the stop intent of `incarnation` is settled; a no-op for an unknown one. */
  clearStopIntent(incarnation: string, signal?: AbortSignal): Promise<void>;
  openStopIntents(): StopIntent[];
  stats(): OutboxStats;
  health(): OutboxHealth;
  /** Resolves when every accepted event is acknowledged (depth 0). */
  flushed(signal?: AbortSignal): Promise<void>;
  /** Waits for `flushed`, then closes. */
  drain(signal?: AbortSignal): Promise<void>;
  /**
   * Stops publishing now (in-flight publishes are aborted; they stay in the
   * journal and are re-sent after the next start) and waits for the pending
   * `published` marks to be journaled.
   */
  close(): Promise<void>;
}

type State = "new" | "starting" | "running" | "closed";

interface Entry {
  readonly seq: number;
  readonly event: Event;
  readonly priority: EventPriority;
}

/** Creates an outbox; nothing happens until `start`. */
export function createOutbox(options: OutboxOptions): Outbox {
  const { journal, publisher, clock, rng } = options;
  const capacity = options.capacity ?? 100_000;
  const maxInFlight = options.maxInFlight ?? 512;
  const backoff = options.retryBackoff ?? { initialMs: 100, factor: 2, maxMs: 2_000, jitter: 0.2 };
  const recoverBelow = Math.floor(capacity * (options.recoverBelowFraction ?? 0.9));
  const priorityOf = options.priorityOf ?? eventPriorityOf;
  if (!Number.isInteger(capacity) || capacity < 1) throw invalidArgument("capacity", `must be an integer >= 1, got ${String(capacity)}`);
  if (!Number.isInteger(maxInFlight) || maxInFlight < 1) throw invalidArgument("maxInFlight", `must be an integer >= 1, got ${String(maxInFlight)}`);

  let state: State = "new";
  let factory: EventFactory | undefined;
  const closeCtl = new AbortController();

  // Events to send, one FIFO per priority (sent in `seq` order across both, so
  // the split only decides what a full outbox gives up), plus a retry list kept
  // sorted by `seq` so a retried event goes out before younger ones (order is
  // per instance best effort; subscribers order by (epoch, n)).
  const critical = new EntryQueue<Entry>();
  const low = new EntryQueue<Entry>();
  const retry: Entry[] = [];
  let nextSeq = 0;
  let inFlight = 0;
  let journaling = 0; // appends accepted but not yet fsync'd: they count toward depth
  let failureStreak = 0;
  let retryTimer: Cancel | undefined;
  let unsubscribeReady: (() => void) | undefined;

  const intents = new Map<string, StopIntent>();
  let pendingMarks: string[] = [];
  let marking: Promise<void> | undefined;

  let appended = 0;
  let published = 0;
  let duplicates = 0;
  let dropped = 0;
  let droppedCritical = 0;
  let displaced = 0;
  let retries = 0;
  let markErrors = 0;
  let lastPublishError: string | undefined;
  let overflowed = false;
  let journalError: string | undefined;
  let health: OutboxHealth = { status: "serving" };
  let flushWaiters: (() => void)[] = [];

  const queued = (): number => critical.size + low.size + retry.length;
  const depth = (): number => queued() + inFlight + journaling;

  const stats = (): OutboxStats => ({
    depth: depth(),
    inFlight,
    capacity,
    appended,
    published,
    duplicates,
    dropped,
    droppedCritical,
    displaced,
    retries,
    markErrors,
    openStopIntents: intents.size,
    lastPublishError,
    health,
  });

  const updateHealth = (): void => {
    const d = depth();
    if (overflowed && d <= recoverBelow) overflowed = false;
    let next: OutboxHealth;
    if (journalError !== undefined) next = { status: "not-serving", reason: `journal failing: ${journalError}` };
    else if (overflowed || d >= capacity) next = { status: "not-serving", reason: `outbox full (capacity ${capacity}); ${dropped} events dropped so far, ${droppedCritical} of them critical` };
    else next = { status: "serving" };
    const reason = (h: OutboxHealth): string => (h.status === "serving" ? "" : h.reason);
    const changed = next.status !== health.status || reason(next) !== reason(health);
    health = next;
    // The reason carries the drop count, so while full every drop is reported:
    // the caller logs each one at error level and exports the counter.
    if (changed) options.onHealthChange?.(health, stats());
  };

  const requireState = (want: State, what: string): void => {
    if (state !== want) throw new WardenError(Code.FailedPrecondition, `outbox: ${what} needs state ${want}, state is ${state}`);
  };

  const enqueue = (event: Event, priority: EventPriority): void => {
    (priority === "low" ? low : critical).push({ seq: nextSeq++, event, priority });
  };

  const takeNext = (): Entry | undefined => {
    const r = retry.shift();
    if (r !== undefined) return r;
    const c = critical.peek();
    const l = low.peek();
    if (c === undefined) return low.shift();
    if (l === undefined) return critical.shift();
    return c.seq < l.seq ? critical.shift() : low.shift();
  };

  const putBack = (entry: Entry): void => {
    let lo = 0;
    let hi = retry.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((retry[mid]?.seq ?? 0) < entry.seq) lo = mid + 1;
      else hi = mid;
    }
    retry.splice(lo, 0, entry);
  };

  const flushMarks = (): void => {
    if (marking !== undefined || pendingMarks.length === 0) return;
    const eventIds = pendingMarks;
    pendingMarks = [];
    // One `published` record per batch of acks; the next batch is written when
    // this one is durable, so marks batch themselves under load without timers.
    marking = journal
      .append({ kind: "published", eventIds })
      .catch(() => {
        markErrors++;
      })
      .finally(() => {
        marking = undefined;
        flushMarks();
        notifyFlushed();
      });
  };

  const notifyFlushed = (): void => {
    if (depth() > 0 || marking !== undefined || pendingMarks.length > 0) return;
    const waiters = flushWaiters;
    flushWaiters = [];
    for (const w of waiters) w();
  };

  const pump = (): void => {
    if (state !== "running" || retryTimer !== undefined) return;
    // After a failure only one publish probes the connection at a time: a dead
    // server must not collect thousands of buffered publishes (each one would
    // become a duplicate on reconnect). The first success opens the window again.
    const window = failureStreak > 0 ? 1 : maxInFlight;
    while (inFlight < window) {
      const entry = takeNext();
      if (entry === undefined) break;
      send(entry);
    }
  };

  /** Ends a back-off wait early (the publisher is healthy again) and sends what is queued. */
  const wakeUp = (): void => {
    if (retryTimer !== undefined) {
      retryTimer();
      retryTimer = undefined;
    }
    pump();
  };

  const send = (entry: Entry): void => {
    inFlight++;
    let settled: Promise<unknown>;
    try {
      settled = publisher.publish(entry.event, closeCtl.signal);
    } catch (err) {
      settled = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    settled.then(
      (ack) => {
        inFlight--;
        if (state === "closed") return;
        published++;
        if ((ack as { duplicate?: boolean } | undefined)?.duplicate === true) duplicates++;
        failureStreak = 0;
        // The stream answers again: a back-off wait scheduled by an earlier
        // failure would only delay the backlog, so the window reopens now.
        wakeUp();
        pendingMarks.push(entry.event.id);
        flushMarks();
        updateHealth();
        pump();
        notifyFlushed();
      },
      (err: unknown) => {
        inFlight--;
        if (state === "closed") return;
        retries++;
        lastPublishError = err instanceof Error ? err.message : String(err);
        putBack(entry);
        // One back-off step per round, not per event: when the connection drops,
        // hundreds of in-flight publishes fail together and count once.
        if (retryTimer === undefined) {
          failureStreak++;
          retryTimer = clock.setTimer(backoffDelayMs(backoff, failureStreak - 1, rng), () => {
            retryTimer = undefined;
            pump();
          });
        }
      },
    );
  };

  const append = async (event: Event, signal?: AbortSignal): Promise<AppendOutcome> => {
    requireState("running", "append");
    throwIfAborted(signal);
    if (event.id === "" || event.payload.case === undefined) throw invalidArgument("event", "needs an id and a payload (use outbox.events.create)");
    const priority = priorityOf(event);
    if (depth() >= capacity) {
      dropped++;
      overflowed = true;
      const victim = priority === "critical" ? low.pop() : undefined;
      if (victim === undefined) {
        if (priority === "critical") droppedCritical++;
        updateHealth();
        return "dropped";
      }
      // The victim is journaled but will never be published: a `published`
      // mark settles it, so a restart does not send it (or refill the outbox) either.
      displaced++;
      pendingMarks.push(victim.event.id);
      flushMarks();
      updateHealth();
    }
    // Planted bug "publish-before-append": queued (and maybe sent) before the journal holds it.
    const early = isPlanted("publish-before-append");
    if (early) {
      enqueue(event, priority);
      pump();
    }
    journaling++;
    try {
      await journal.append({ kind: "event", event }, signal);
      if (journalError !== undefined) journalError = undefined;
    } catch (err) {
      journaling--;
      journalError = WardenError.from(err).rawMessage;
      updateHealth();
      throw WardenError.from(err, Code.Unavailable);
    }
    journaling--;
    appended++;
    // Journaled: from here on the event survives a crash, so it may be published.
    if (state === "closed") return "queued"; // re-sent by the next start
    if (!early) enqueue(event, priority);
    updateHealth();
    pump();
    return "queued";
  };

  const durable = async (what: string, write: () => Promise<void>): Promise<void> => {
    try {
      await write();
      if (journalError !== undefined) {
        journalError = undefined;
        updateHealth();
      }
    } catch (err) {
      journalError = WardenError.from(err).rawMessage;
      updateHealth();
      throw new WardenError(Code.Unavailable, `outbox: ${what} not journaled: ${WardenError.from(err).rawMessage}`, { cause: err });
    }
  };

  const outbox: Outbox = {
    async start(signal) {
      requireState("new", "start");
      state = "starting";
      try {
        const records = await journal.replay(signal);
        const replayed = reduceJournal(records);
        const epoch = options.epoch ?? maxBig(replayed.maxEpoch + 1n, BigInt(Math.floor(clock.wallNow())));
        // Written first so epochs keep growing even after compaction drops events.
        await journal.append({ kind: "epoch", epoch }, signal);
        factory = createEventFactory({ clock, newId: options.newId, epoch });
        for (const [k, v] of replayed.openStopIntents) intents.set(k, v);
        for (const e of replayed.unpublished.values()) enqueue(e, priorityOf(e));
        appended += replayed.unpublished.size;
        state = "running";
        const recovered: Event[] = [];
        const unfinished = unfinishedInstances(replayed);
        const unsettledEvictions = unfinished.filter((e) => e.payload.case === "evictionStarted");
        for (const last of unfinished) {
          const event = factory.create({
            nodeId: last.nodeId,
            model: last.model,
            address: last.address,
            incarnation: last.incarnation,
            payload: { case: "recovered", value: create(RecoveredSchema, { lastEventType: eventTypeOf(last) }) },
          });
          if ((await append(event, signal)) === "queued") recovered.push(event);
        }
        updateHealth();
        unsubscribeReady = publisher.onReady?.(() => {
          if (state !== "running" || failureStreak === 0) return;
          // The transport is back: probe now (still one at a time) and start the
          // back-off over, so a stream that needs a moment after a server restart
          // is retried within milliseconds rather than at the outage's long step.
          failureStreak = 1;
          wakeUp();
        });
        pump();
        return { epoch, openStopIntents: [...intents.values()], requeued: replayed.unpublished.size, recovered, unsettledEvictions };
      } catch (err) {
        if (state === "starting") state = "new";
        throw err;
      }
    },

    get events(): EventFactory {
      if (factory === undefined) throw new WardenError(Code.FailedPrecondition, `outbox: events need state running, state is ${state}`);
      return factory;
    },

    append,

    async emit(init, signal) {
      requireState("running", "emit");
      const event = outbox.events.create(init);
      return { event, outcome: await append(event, signal) };
    },

    async recordStopIntent(init, signal) {
      requireState("running", "recordStopIntent");
      if (init.incarnation === "") throw invalidArgument("incarnation", "must not be empty");
      const intent: StopIntent = { ...init, recordedAtMs: init.recordedAtMs ?? Math.floor(clock.wallNow()) };
      // Known from the moment it is issued: replay follows issue order, so a
      // clear issued before this record is fsync'd lands after it and must
      // clear it (a clear that found nothing left the intent open for an
      // instance no longer tracked — simulation seed 3826). Undone on failure.
      const previous = intents.get(intent.incarnation);
      intents.set(intent.incarnation, intent);
      try {
        await durable("stop intent", () => journal.append({ kind: "stop-intent", ...intent }, signal));
      } catch (err) {
        if (intents.get(intent.incarnation) === intent) {
          if (previous === undefined) intents.delete(intent.incarnation);
          else intents.set(intent.incarnation, previous);
        }
        throw err;
      }
    },

    async clearStopIntent(incarnation, signal) {
      requireState("running", "clearStopIntent");
      const cleared = intents.get(incarnation);
      if (cleared === undefined) return;
      await durable("stop intent clear", () => journal.append({ kind: "stop-intent-cleared", incarnation }, signal));
      // A record issued after this clear is the newer word: it stays.
      if (intents.get(incarnation) === cleared) intents.delete(incarnation);
    },

    openStopIntents: () => [...intents.values()],
    stats,
    health: () => health,

    flushed(signal) {
      return new Promise<void>((resolve, reject) => {
        if (signal?.aborted === true) {
          reject(abortReason(signal));
          return;
        }
        const done = (): void => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        };
        const onAbort = (): void => {
          flushWaiters = flushWaiters.filter((w) => w !== done);
          if (signal !== undefined) reject(abortReason(signal));
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        flushWaiters.push(done);
        notifyFlushed();
      });
    },

    async drain(signal) {
      requireState("running", "drain");
      await outbox.flushed(signal);
      await outbox.close();
    },

    async close() {
      if (state === "closed") return;
      state = "closed";
      unsubscribeReady?.();
      retryTimer?.();
      retryTimer = undefined;
      closeCtl.abort(new WardenError(Code.Canceled, "outbox closed"));
      while (marking !== undefined) await marking;
    },
  };
  return outbox;
}

function maxBig(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
