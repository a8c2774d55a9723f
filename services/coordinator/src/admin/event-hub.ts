import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { EvictionFailedOutcome, EvictionReason, type Event } from "@warden/proto";
import { eventToJson, eventTypeOf, matchesEventFilter, type EventFilter, type EventInit } from "@warden/events";
import type { AppendOutcome, Outbox } from "@warden/outbox";
import { Code, WardenError, capExceeded, type Logger } from "@warden/common";
import type { LoaderEvent, LoaderEventSink } from "@warden/loader";
import { loadJobPhaseToWire } from "./load-job-wire.js";
import type { EvictionReason as CoreReason } from "@warden/watchdog";

const reasons: Readonly<Record<CoreReason | "orphan" | "vanished", EvictionReason>> = {
  group: EvictionReason.GROUP,
  lru: EvictionReason.LRU,
  idle: EvictionReason.IDLE,
  busy: EvictionReason.BUSY,
  memory: EvictionReason.MEMORY,
  admin: EvictionReason.ADMIN,
  drain: EvictionReason.DRAIN,
  config: EvictionReason.CONFIG,
  health: EvictionReason.HEALTH,
  retry: EvictionReason.ADMIN,
  orphan: EvictionReason.ORPHAN,
  vanished: EvictionReason.VANISHED,
  "scale-down": EvictionReason.SCALE_DOWN,
  rollout: EvictionReason.ROLLOUT,
};

/** Maps a loader event to the DESIGN §4 event payload. */
export function eventInitOf(e: LoaderEvent): EventInit {
  const base = { nodeId: e.nodeId, model: e.model, address: e.address, incarnation: e.incarnation, ...(e.actor === undefined ? {} : { actor: e.actor }) };
  switch (e.type) {
    case "eviction.started":
      return { ...base, payload: { case: "evictionStarted", value: { $typeName: "warden.v1.EvictionStarted", reason: reasons[e.reason], trigger: e.trigger, wasBusy: e.wasBusy, force: e.force, openRequestIds: [...e.openRequestIds] } } };
    case "eviction.stopped":
      return { ...base, payload: { case: "evictionStopped", value: { $typeName: "warden.v1.EvictionStopped", reason: reasons[e.reason], alreadyGone: e.alreadyGone, stopDurationMs: BigInt(e.stopDurationMs) } } };
    case "eviction.failed":
      return {
        ...base,
        payload: {
          case: "evictionFailed",
          value: {
            $typeName: "warden.v1.EvictionFailed",
            reason: reasons[e.reason],
            error: e.error,
            outcome: e.outcome === "leftover" ? EvictionFailedOutcome.LEFTOVER : EvictionFailedOutcome.REGISTERED_AGAIN,
            openRequestIds: [...e.openRequestIds],
            terminalReason: e.terminalReason,
          },
        },
      };
    case "eviction.retried":
      return { ...base, payload: { case: "evictionRetried", value: { $typeName: "warden.v1.EvictionRetried", attempt: e.attempt, error: e.error } } };
    case "leftover.stuck":
      return { ...base, payload: { case: "leftoverStuck", value: { $typeName: "warden.v1.LeftoverStuck", attempts: e.attempts, since: timestampFromMs(e.sinceWallMs), lastError: e.lastError } } };
    case "leftover.reaped":
      return { ...base, payload: { case: "leftoverReaped", value: { $typeName: "warden.v1.LeftoverReaped", attempts: e.attempts } } };
    case "backend.loaded":
      return { ...base, payload: { case: "backendLoaded", value: { $typeName: "warden.v1.BackendLoaded", loadDurationMs: BigInt(e.loadDurationMs) } } };
    case "backend.load-failed":
      return {
        ...base,
        payload: { case: "backendLoadFailed", value: { $typeName: "warden.v1.BackendLoadFailed", code: e.code, message: e.message, lastStderrLine: e.lastStderrLine, outcomeUnknown: e.outcomeUnknown, ...(e.exitCode === undefined ? {} : { exitCode: e.exitCode }) } },
      };
    case "backend.exited":
      return {
        ...base,
        payload: { case: "backendExited", value: { $typeName: "warden.v1.BackendExitedEvent", signal: e.signal, intentional: e.intentional, lastStderrLine: e.lastStderrLine, ...(e.exitCode === undefined ? {} : { exitCode: e.exitCode }) } },
      };
    case "policy.limit-exceeded":
      return { ...base, payload: { case: "policyLimitExceeded", value: { $typeName: "warden.v1.PolicyLimitExceeded", limit: e.limit, occupied: e.occupied, pinned: e.pinned } } };
    case "instance.forgotten":
      return { ...base, payload: { case: "instanceForgotten", value: { $typeName: "warden.v1.InstanceForgotten", operator: e.operator, note: e.note } } };
    case "instance.adopted":
      return { ...base, payload: { case: "instanceAdopted", value: { $typeName: "warden.v1.InstanceAdopted", asLeftover: e.asLeftover, foundBy: e.foundBy } } };
    case "replica.scaled-up":
      return { ...base, payload: { case: "replicaScaledUp", value: { $typeName: "warden.v1.ReplicaScaledUp", cause: e.cause, replicas: e.replicas } } };
    case "replica.scaled-down":
      return { ...base, payload: { case: "replicaScaledDown", value: { $typeName: "warden.v1.ReplicaScaledDown", replicas: e.replicas, cause: e.cause } } };
    case "replica.scale-blocked":
      return { ...base, payload: { case: "replicaScaleBlocked", value: { $typeName: "warden.v1.ReplicaScaleBlocked", error: e.error, failures: e.failures, retryAfterMs: BigInt(Math.max(0, Math.round(e.retryAfterMs))) } } };
    case "rollout.started":
      return { ...base, payload: { case: "rolloutStarted", value: { $typeName: "warden.v1.RolloutStarted", stale: e.stale, keep: e.keep } } };
    case "rollout.finished":
      return { ...base, payload: { case: "rolloutFinished", value: { $typeName: "warden.v1.RolloutFinished", replaced: e.replaced, ready: e.ready } } };
    case "replica.scale-set":
      return { ...base, payload: { case: "replicaScaleSet", value: { $typeName: "warden.v1.ReplicaScaleSet", operator: e.operator, min: e.min, max: e.max } } };
    case "load.waiting":
      return { ...base, payload: { case: "loadWaiting", value: { $typeName: "warden.v1.LoadWaiting", reason: e.reason, loadIncarnation: e.loadIncarnation } } };
    case "load.failed":
      return { ...base, payload: { case: "loadFailed", value: { $typeName: "warden.v1.LoadFailed", reason: e.reason, code: e.code, phase: loadJobPhaseToWire[e.phase], loadIncarnation: e.loadIncarnation } } };
  }
}

/** Caps on open WatchEvents streams (coordinator `limits.maxWatchers` / `maxWatchersPerCaller`). */
export interface WatchCaps {
  readonly maxWatchers: number;
  readonly maxWatchersPerCaller: number;
}

interface Subscriber {
  readonly filter: EventFilter;
  readonly push: (e: Event) => void;
  /** The hub closed: the stream ends with UNAVAILABLE once its queue is sent. */
  readonly end: () => void;
}

/**
 * What every watch ended by a shutdown gets: UNAVAILABLE (a follower such as
 * `warden events --follow` reconnects) with details.shutdown, so a client
 * tells it from an address where nothing listens.
 */
const shuttingDown = (): WardenError => new WardenError(Code.Unavailable, "coordinator shutting down; reconnect to follow its successor", { details: { shutdown: true } });

/**
 * Where every event goes: the outbox (journaled, then published to NATS when
 * configured), the log (one line per committed decision) and WatchEvents
 * subscribers. One ordering: an event reaches subscribers in emit order.
 */
export class EventHub implements LoaderEventSink {
  private readonly subscribers = new Set<Subscriber>();
  private readonly observers: ((e: Event) => void)[] = [];
  private closed = false;
  /** Open streams per caller (only callers with at least one). */
  private readonly perCaller = new Map<string, number>();
  /** Default cap of concurrent WatchEvents streams (client-keyed resource). */
  static readonly maxSubscribers = 256;
  /** Default cap of one caller's concurrent WatchEvents streams. */
  static readonly maxSubscribersPerCaller = 16;

  constructor(
    private readonly outbox: Outbox,
    private readonly log: Logger,
    private readonly caps: WatchCaps = { maxWatchers: EventHub.maxSubscribers, maxWatchersPerCaller: EventHub.maxSubscribersPerCaller },
  ) {}

  emit(e: LoaderEvent): void {
    void this.emitDurable(e);
  }

  async emitDurable(e: LoaderEvent): Promise<void> {
    await this.publish(eventInitOf(e));
  }

  /** Appends an event made outside the loader (node.*, recovered …). */
  async publish(init: EventInit): Promise<Event | undefined> {
    try {
      const { event, outcome } = await this.outbox.emit(init);
      this.deliver(event, outcome);
      return event;
    } catch (err) {
      // Only a closed outbox refuses (a journal refusal defers the event): loud, never a silent gap.
      this.log.error("audit event not accepted by the outbox", { err: err instanceof Error ? err.message : String(err), model: init.model, incarnation: init.incarnation });
      return undefined;
    }
  }

  /** Registers a synchronous observer of every event (metrics). Must not throw. */
  observe(fn: (e: Event) => void): void {
    this.observers.push(fn);
  }

  /** Delivers an event already journaled (e.g. `recovered` events from start-up). */
  deliver(event: Event, outcome: AppendOutcome = "queued"): void {
    const json = eventToJson(event);
    // deferred: the journal refused it for now; the outbox journals it in order when it recovers.
    this.log.info(`event ${eventTypeOf(event)}`, { event: json, ...(outcome === "dropped" ? { outboxDropped: true } : outcome === "deferred" ? { journalDeferred: true } : {}) });
    for (const o of this.observers) o(event);
    for (const s of this.subscribers) if (matchesEventFilter(event, s.filter)) s.push(event);
  }

  /** Open WatchEvents streams (and in-process watchers). */
  get watching(): number {
    return this.subscribers.size;
  }

  /**
   * Ends every watch with UNAVAILABLE "coordinator shutting down" (after the
   * events already queued for it) and refuses new ones. Called before the
   * gRPC server drains: a follower's stream never ends by itself, so it would
   * hold the drain until the shutdown grace forced every call closed.
   */
  close(): void {
    this.closed = true;
    for (const s of this.subscribers) s.end();
  }

  /** Streams events matching `filter` until `signal` aborts. Bounded queue per subscriber: a slow watcher loses its stream, never the coordinator's memory. */
  /**
   * `caller` (see watchCallerOf) is counted against the per-caller cap, so one
   * client cannot take every slot; in-process watchers pass none.
   */
  async *watch(filter: EventFilter, signal: AbortSignal, maxQueued = 10_000, caller?: string): AsyncIterable<Event> {
    if (this.closed) throw shuttingDown();
    if (this.subscribers.size >= this.caps.maxWatchers) throw capExceeded("watchers", `too many WatchEvents streams (cap ${String(this.caps.maxWatchers)})`);
    const mine = caller === undefined ? 0 : (this.perCaller.get(caller) ?? 0);
    if (caller !== undefined && mine >= this.caps.maxWatchersPerCaller) throw capExceeded("watchers_per_caller", `${caller} has ${String(mine)} WatchEvents streams open (cap ${String(this.caps.maxWatchersPerCaller)} per caller)`);
    const queue: Event[] = [];
    let wake: (() => void) | undefined;
    const state = { overflow: false, ended: false };
    const sub: Subscriber = {
      filter,
      push: (e) => {
        if (queue.length >= maxQueued) state.overflow = true;
        else queue.push(e);
        wake?.();
      },
      end: () => {
        state.ended = true;
        wake?.();
      },
    };
    this.subscribers.add(sub);
    if (caller !== undefined) this.perCaller.set(caller, mine + 1);
    const onAbort = (): void => wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      while (!signal.aborted) {
        const next = queue.shift();
        if (next !== undefined) {
          yield next;
          continue;
        }
        if (state.overflow) throw new WardenError(Code.ResourceExhausted, `WatchEvents stream fell more than ${String(maxQueued)} events behind; reconnect (or read the NATS audit stream)`);
        if (state.ended) throw shuttingDown();
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      this.subscribers.delete(sub);
      if (caller !== undefined) {
        const left = (this.perCaller.get(caller) ?? 1) - 1;
        if (left > 0) this.perCaller.set(caller, left);
        else this.perCaller.delete(caller);
      }
      signal.removeEventListener("abort", onAbort);
    }
  }
}
