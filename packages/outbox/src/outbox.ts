import type { Event } from "@warden/proto";
import { create } from "@bufbuild/protobuf";
import { RecoveredSchema } from "@warden/proto";
import { Code, WardenError, backoffDelayMs, invalidArgument, isPlanted, isStaleLeaderEpoch, throwIfAborted, type Cancel } from "@warden/common";
import { createEventFactory, eventTypeOf, type EventFactory } from "@warden/events";
import { reduceJournal, unfinishedInstances } from "./reduce-journal.js";
import { eventPriorityOf } from "./event-priority.js";
import type { AppendOutcome, Outbox, OutboxHealth, OutboxOptions, OutboxStats } from "./outbox-types.js";
import { SendQueue, type OutboxEntry } from "./send-queue.js";
import { AppendLane } from "./append-lane.js";
import { FlushWaiters } from "./flush-waiters.js";
import { stopIntentMethods } from "./stop-intent-methods.js";
import { StopIntentIndex } from "./stop-intent-index.js";
import { OlderTerms } from "./older-terms.js";
import { outboxHealth, sameHealth } from "./outbox-health.js";

type State = "new" | "starting" | "running" | "closed";

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

  const queue = new SendQueue();
  let inFlight = 0;
  let journaling = 0; // appends accepted but not yet fsync'd: they count toward depth
  let failureStreak = 0;
  let retryTimer: Cancel | undefined;
  let unsubscribeReady: (() => void) | undefined;

  /** Replayed events of an older leader epoch not yet acknowledged (older-terms.ts). */
  const olderTerm = new OlderTerms();
  const intents = new StopIntentIndex();
  let pendingMarks: string[] = [];
  let marking: Promise<void> | undefined;

  /** The running counts stats() reports. */
  const count = { appended: 0, published: 0, duplicates: 0, dropped: 0, droppedCritical: 0, displaced: 0, retries: 0, markErrors: 0 };
  let lastPublishError: string | undefined;
  let overflowed = false;
  let journalError: string | undefined;
  /** The journal's last refusal of an event the lane still holds. */
  let laneError: string | undefined;
  let health: OutboxHealth = { status: "serving" };
  const flushWaiters = new FlushWaiters();

  // Events the journal refused wait in the lane, in order, until it takes writes again.
  const lane = new AppendLane({
    journal,
    clock,
    rng,
    backoff,
    closed: closeCtl.signal,
    onJournaled: (event) => {
      count.appended++;
      if (state !== "running") return; // re-sent by the next start
      queue.push(event, priorityOf(event));
      updateHealth();
      pump();
    },
    onError: (message) => {
      laneError = message;
      updateHealth();
      notifyFlushed();
    },
    onSuperseded: (n, err) => {
      count.dropped += n;
      options.onSuperseded?.(err);
    },
  });

  const depth = (): number => queue.size + inFlight + journaling + lane.size;

  const stats = (): OutboxStats => ({
    depth: depth(),
    inFlight,
    capacity,
    ...count,
    openStopIntents: intents.size,
    lastPublishError,
    health,
  });

  const updateHealth = (): void => {
    const d = depth();
    if (overflowed && d <= recoverBelow) overflowed = false;
    const next = outboxHealth({ journalError, laneSize: lane.size, laneError, full: overflowed || d >= capacity, capacity, dropped: count.dropped, droppedCritical: count.droppedCritical });
    const changed = !sameHealth(next, health);
    health = next;
    // The reason carries the drop count, so while full every drop is reported:
    // the caller logs each one at error level and exports the counter.
    if (changed) options.onHealthChange?.(health, stats());
  };

  const requireState = (want: State, what: string): void => {
    if (state !== want) throw new WardenError(Code.FailedPrecondition, `outbox: ${what} needs state ${want}, state is ${state}`);
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
        count.markErrors++;
      })
      .finally(() => {
        marking = undefined;
        flushMarks();
        notifyFlushed();
      });
  };

  const notifyFlushed = (): void => {
    if (depth() > 0 || marking !== undefined || pendingMarks.length > 0) return;
    flushWaiters.wakeAll();
  };

  const pump = (): void => {
    if (state !== "running" || retryTimer !== undefined) return;
    if (options.mayPublish?.() === false) {
      // Not the leader at this moment (HA): what is queued is journaled, so the leader
      // that replays the journal sends it; this member waits and looks again.
      retryTimer = clock.setTimer(backoff.initialMs, () => {
        retryTimer = undefined;
        pump();
      });
      return;
    }
    // After a failure only one publish probes the connection at a time: a dead
    // server must not collect thousands of buffered publishes (each one would
    // become a duplicate on reconnect). The first success opens the window again.
    const window = failureStreak > 0 ? 1 : maxInFlight;
    while (inFlight < window) {
      // An older term's replayed events go out, and are acknowledged, before this term's first.
      if (olderTerm.size > 0) {
        const next = queue.peekNext();
        const oldest = olderTerm.oldest();
        if (next !== undefined && oldest !== undefined && next.event.leaderEpoch > oldest) break;
      }
      const entry = queue.takeNext();
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

  const send = (entry: OutboxEntry): void => {
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
        count.published++;
        olderTerm.settle(entry.event.id);
        if ((ack as { duplicate?: boolean } | undefined)?.duplicate === true) count.duplicates++;
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
        count.retries++;
        lastPublishError = err instanceof Error ? err.message : String(err);
        queue.putBack(entry);
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
      count.dropped++;
      overflowed = true;
      const victim = priority === "critical" ? queue.popLow() : undefined;
      if (victim === undefined) {
        if (priority === "critical") count.droppedCritical++;
        updateHealth();
        return "dropped";
      }
      // The victim is journaled but will never be published: a `published`
      // mark settles it, so a restart does not send it (or refill the outbox) either.
      count.displaced++;
      olderTerm.settle(victim.event.id);
      pendingMarks.push(victim.event.id);
      flushMarks();
      updateHealth();
    }
    // Planted bug "publish-before-append": queued (and maybe sent) before the journal holds it.
    const early = isPlanted("publish-before-append");
    if (early) {
      queue.push(event, priority);
      pump();
    }
    // Behind events the journal refused: wait in their line, so the journal keeps emit order.
    if (lane.size > 0) {
      lane.push(event);
      updateHealth();
      return "deferred";
    }
    journaling++;
    try {
      await journal.append({ kind: "event", event }, signal);
      if (journalError !== undefined) journalError = undefined;
    } catch (err) {
      journaling--;
      if (isStaleLeaderEpoch(err)) {
        // A newer leader wrote to the journal: never deferred, never retried (this is an ex-leader's event).
        count.dropped++;
        lane.supersede(err);
        updateHealth();
        throw WardenError.from(err);
      }
      if (signal?.aborted === true || state !== "running") {
        updateHealth();
        throw WardenError.from(err, Code.Unavailable);
      }
      // Refused (a replicated journal electing a leader, a full disk): not lost — the lane
      // journals it again, before anything newer, once the journal takes writes.
      lane.push(event, err);
      updateHealth();
      return "deferred";
    }
    journaling--;
    count.appended++;
    // Journaled: from here on the event survives a crash, so it may be published.
    if (state === "closed") return "queued"; // re-sent by the next start
    if (!early) queue.push(event, priority);
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
        factory = createEventFactory({ clock, newId: options.newId, epoch, ...(options.leaderEpoch === undefined ? {} : { leaderEpoch: options.leaderEpoch }) });
        for (const [k, v] of replayed.openStopIntents) intents.set(k, v);
        // By leader epoch (stable: journal order within one), so a term's backlog never waits behind a newer term's.
        const backlog = [...replayed.unpublished.values()].sort((a, b) => (a.leaderEpoch < b.leaderEpoch ? -1 : a.leaderEpoch > b.leaderEpoch ? 1 : 0));
        for (const e of backlog) {
          queue.push(e, priorityOf(e));
          if (options.leaderEpoch !== undefined && e.leaderEpoch < options.leaderEpoch) {
            olderTerm.add(e.id, e.leaderEpoch);
          }
        }
        count.appended += replayed.unpublished.size;
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
          if ((await append(event, signal)) !== "dropped") recovered.push(event);
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

    ...stopIntentMethods({ intents, journal, clock, requireState, durable }),
    stats,
    health: () => health,

    flushed(signal) {
      return flushWaiters.wait(signal, notifyFlushed);
    },

    async drain(signal) {
      requireState("running", "drain");
      await outbox.flushed(signal);
      await outbox.close();
    },

    async close() {
      if (state === "closed") return;
      state = "closed";
      lane.close();
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
