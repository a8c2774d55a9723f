import type { Event } from "@warden/proto";
import type { BackoffPolicy, Clock, Rng } from "@warden/common";
import type { EventFactory, EventInit } from "@warden/events";
import type { EventPriority } from "./event-priority.js";
import type { Journal } from "./journal-port.js";
import type { StopIntent } from "./journal-record.js";
import type { Publisher } from "./publisher-port.js";

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
 * `deferred`: the journal refused it (or an earlier event still waits): it is
 * journaled, in emit order, once the journal takes writes again, and published
 * after that; meanwhile the outbox reports not-serving.
 */
export type AppendOutcome = "queued" | "dropped" | "deferred";

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
  /**
   * HA: false while this member does not hold the leader lease; nothing is
   * published meanwhile (queued events are journaled, so the member that leads
   * next publishes them after its replay). Looked at before every send.
   * @default always true
   */
  readonly mayPublish?: () => boolean;
  /** HA: the journal refused an append as from a superseded leader (terminal; the events waiting were dropped). */
  readonly onSuperseded?: (err: unknown) => void;
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
  /**
   * HA: this term's lease epoch, stamped on every new event (`Event.leader_epoch`).
   * Replayed events of an older term are published first: nothing of this
   * term is sent until each of them is acknowledged, so the stream never
   * holds an older `leader_epoch` after a newer one. @default 0 (no HA)
   */
  readonly leaderEpoch?: bigint;
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
   * and a flood of peer reports never costs one. A journal refusal does not
   * lose the event: it resolves `deferred` (see {@link AppendOutcome}). Rejects
   * only when `signal` aborts or the outbox is not running.
   */
  append(event: Event, signal?: AbortSignal): Promise<AppendOutcome>;
  /** `events.create(init)` then `append`. */
  emit(init: EventInit, signal?: AbortSignal): Promise<{ event: Event; outcome: AppendOutcome }>;
  /** Journals a stop intent durably (DESIGN §3.3 step 4); resolves once fsync'd. */
  recordStopIntent(intent: Omit<StopIntent, "recordedAtMs"> & { recordedAtMs?: number }, signal?: AbortSignal): Promise<void>;
  /** Journals that the stop intent of `incarnation` is settled; a no-op for an unknown one. */
  clearStopIntent(incarnation: string, signal?: AbortSignal): Promise<void>;
  openStopIntents(): StopIntent[];
  /** Whether `incarnation` has an open stop intent (a lookup: asked per inventory entry). */
  hasStopIntent(incarnation: string): boolean;
  /** Incarnations with an open stop intent on `nodeId` (a lookup: asked per heartbeat). */
  openStopIntentsOn(nodeId: string): string[];
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
