import { Code, WardenError, backoffDelayMs, deadlineSignal, raceSignal, isWardenError, leftoverBackoff, type Clock, type Rng, type BackoffPolicy, type Cancel } from "@warden/common";
import {
  createWatchdogCore,
  createWatchdogService,
  type ExplicitStopOptions,
  type InstanceView,
  type MemoryReading,
  type OccupancyEntry,
  type PolicyPatch,
  type SettleReport,
  type Shortfall,
  type StopCommand,
  type StopOutcome,
  type WatchdogCaps,
  type WatchdogCore,
  type WatchdogPolicy,
  type WatchdogService,
} from "@warden/watchdog";
import { LockTable } from "./lifecycle-lock.js";
import { LoadCooldown, type CooldownPolicy } from "./load-cooldown.js";
import { GoneIncarnations } from "./gone-incarnations.js";
import { LeftoverTracker, type Leftover } from "./leftover-tracker.js";
import type { AdoptionSource, LoaderEventSink } from "./loader-event.js";
import type { HeldInstance, InventoryPort, Lease, PlacementPort, UnloadOutcome } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { AgentDirectory, BackendConnector, BackendHandle, Sleep, StartEvent, StopIntentJournal } from "./ports.js";

/** Stop timing (DESIGN §5). */
export interface StopTimings {
  /** Bounds lifecycle lock + busy wait + Free. @default 30000 */
  readonly stopTimeoutMs: number;
  /** @default 5000 */
  readonly freeTimeoutMs: number;
  /** StopBackend RPC deadline: SIGTERM grace + 5 s. @default 15000 */
  readonly stopRpcTimeoutMs: number;
  /** Busy-wait poll period. @default 100 */
  readonly busyPollMs: number;
}

export const defaultStopTimings: StopTimings = { stopTimeoutMs: 30_000, freeTimeoutMs: 5_000, stopRpcTimeoutMs: 15_000, busyPollMs: 100 };

export interface LoaderOptions<H extends BackendHandle> {
  readonly clock: Clock;
  readonly rng: Rng;
  readonly sleep: Sleep;
  readonly agents: AgentDirectory;
  readonly backends: BackendConnector<H>;
  readonly journal: StopIntentJournal;
  readonly events: LoaderEventSink;
  readonly placement: PlacementPort;
  readonly inventories: InventoryPort;
  readonly mintIncarnation: () => string;
  readonly models: readonly ModelSpec[];
  readonly policy?: PolicyPatch;
  readonly caps?: Partial<WatchdogCaps>;
  readonly stop?: Partial<StopTimings>;
  /** DESIGN §5: 30 × 1 s. */
  readonly enforcement?: { readonly maxAttempts: number; readonly intervalMs: number };
  readonly cooldown?: CooldownPolicy;
  readonly leftoverBackoff?: BackoffPolicy;
  readonly stuckAfterMs?: number;
  /** Per-model waiting calls (DESIGN §5: 512). */
  readonly maxWaitingPerModel?: number;
  /**
   * Resolves when new loads may start. A restarted coordinator passes a gate
   * that opens once the agents' inventories had a chance to arrive, so a load
   * never starts a second copy of an instance that is about to be adopted.
   */
  readonly admissionGate?: Promise<void>;
  /** Incarnations remembered as confirmed gone, oldest out. @default 4096 */
  readonly maxGoneIncarnations?: number;
  /** Reports what the loader decided but could not act on (bugs, best-effort failures). */
  readonly onWarning?: (msg: string, meta: Record<string, unknown>) => void;
}

interface Waiter {
  readonly promise: Promise<void>;
  readonly resolve: () => void;
}

/**
 * The coordinator's loader (DESIGN §3.3): holds the local half of every
 * instance, runs loads (coalesced, cooldown-checked, admitted through the
 * watchdog with the need-more retry loop, bounded by a deadline), runs the
 * stop sequence for every eviction path, routes calls with watchdog tracking,
 * and retries leftovers. A decision package: every effect goes through a port.
 *
 * One owner: the held-instance table and the model → incarnation index are
 * mutated only here, synchronously, never across an await between a read and
 * the write that depends on it.
 */
export class Loader<H extends BackendHandle = BackendHandle> {
  readonly core: WatchdogCore;
  readonly watchdog: WatchdogService;
  private readonly held = new Map<string, HeldInstance<H>>();
  private readonly current = new Map<string, string>();
  private readonly loads = new Map<string, Promise<HeldInstance<H>>>();
  private readonly loadControllers = new Map<string, AbortController>();
  private readonly locks = new LockTable();
  private readonly cooldown: LoadCooldown;
  private readonly leftovers: LeftoverTracker;
  private readonly orphans = new Map<string, readonly OccupancyEntry[]>();
  private readonly settleWaiters = new Map<string, Waiter>();
  private readonly waiting = new Map<string, number>();
  private readonly stopOverrides = new Map<string, { stopTimeoutMs: number }>();
  private readonly freedRetries = new Map<string, { attempts: number; cancel: Cancel }>();
  private readonly stopFailedAtLock = new Set<string>();
  private models = new Map<string, ModelSpec>();
  /**
   * Incarnations confirmed gone (our stop confirmed, or the agent reported the
   * exit): a heartbeat built before and delivered after must not adopt or list
   * them again, and a call that failed because of that stop is not retried.
   */
  private readonly gone: GoneIncarnations;
  private readonly timings: StopTimings;
  private readonly maxAttempts: number;
  private readonly retryIntervalMs: number;
  private readonly maxWaiting: number;
  private tickCancel: Cancel | undefined;
  private closed = false;

  constructor(private readonly o: LoaderOptions<H>) {
    this.timings = { ...defaultStopTimings, ...o.stop };
    this.maxAttempts = o.enforcement?.maxAttempts ?? 30;
    this.retryIntervalMs = o.enforcement?.intervalMs ?? 1_000;
    this.maxWaiting = o.maxWaitingPerModel ?? 512;
    this.cooldown = new LoadCooldown(o.cooldown);
    this.gone = new GoneIncarnations(o.maxGoneIncarnations);
    for (const m of o.models) this.models.set(m.id, m);
    this.core = createWatchdogCore({
      clock: o.clock,
      loader: { hasModelAtAddress: (model, address, incarnation) => this.hasModelAtAddress(model, address, incarnation) },
      policy: { ...this.modelPolicy(), ...o.policy },
      ...(o.caps === undefined ? {} : { caps: o.caps }),
    });
    this.watchdog = createWatchdogService({
      core: this.core,
      stopPort: { stop: (c) => this.stopSequence(c) },
      onSettled: (r) => {
        this.onSettled(r);
      },
    });
    this.leftovers = new LeftoverTracker({
      clock: o.clock,
      rng: o.rng,
      ...(o.leftoverBackoff === undefined ? {} : { backoff: o.leftoverBackoff }),
      ...(o.stuckAfterMs === undefined ? {} : { stuckAfterMs: o.stuckAfterMs }),
      retry: (l) => this.retryLeftover(l),
      onNodeChanged: (nodeId) => {
        this.pushOccupancy(nodeId);
      },
      onRetried: (l) => {
        this.o.events.emit({ type: "eviction.retried", ...this.base(l), attempt: l.attempts, error: l.lastError });
      },
      onStuck: (l) => {
        this.o.events.emit({ type: "leftover.stuck", ...this.base(l), attempts: l.attempts, sinceWallMs: l.sinceWallMs, lastError: l.lastError });
      },
      onReaped: (l) => {
        this.rememberGone(l.incarnation, l.nodeId);
        this.o.events.emit({ type: "leftover.reaped", ...this.base(l), attempts: l.attempts });
      },
    });
  }

  // ---------------------------------------------------------------- queries

  /** DESIGN §3.2: true while the loader holds this model at this address and incarnation (a load in progress counts). */
  hasModelAtAddress(model: string, address: string, incarnation: string): boolean {
    const h = this.held.get(incarnation);
    return h !== undefined && h.model === model && h.address === address;
  }

  /** The configured models. */
  modelSpecs(): ModelSpec[] {
    return [...this.models.values()];
  }

  modelSpec(id: string): ModelSpec | undefined {
    return this.models.get(id);
  }

  heldInstance(incarnation: string): HeldInstance<H> | undefined {
    return this.held.get(incarnation);
  }

  heldInstances(): HeldInstance<H>[] {
    return [...this.held.values()];
  }

  leftoverList(): Leftover[] {
    return this.leftovers.list();
  }

  /** Loads in progress (leaders only). */
  get loadingCount(): number {
    return this.loads.size;
  }

  getPolicy(): WatchdogPolicy {
    return this.core.getPolicy();
  }

  /** Applies live (DESIGN §3.4 item 6); validated as a whole. */
  updatePolicy(patch: PolicyPatch): WatchdogPolicy {
    return this.core.updatePolicy(patch);
  }

  // ----------------------------------------------------------------- inputs

  /** Memory readings from a node's heartbeat (DESIGN §3.4 item 7). */
  reportMemory(nodeId: string, reading: MemoryReading): void {
    this.core.reportMemory(nodeId, reading);
  }

  /** Orphans on a node (from the reconciler): counted, never selectable. */
  setOrphans(nodeId: string, entries: readonly OccupancyEntry[]): void {
    if (entries.length === 0) this.orphans.delete(nodeId);
    else this.orphans.set(nodeId, entries);
    this.pushOccupancy(nodeId);
  }

  private pushOccupancy(nodeId: string): void {
    this.core.setNodeOccupancy(nodeId, [...this.leftovers.occupancy(nodeId), ...(this.orphans.get(nodeId) ?? [])]);
  }

  /**
   * Replaces the model table (config reload). Pins and groups apply live;
   * models that disappeared are unloaded gracefully with reason `config`.
   */
  setModels(models: readonly ModelSpec[]): Promise<void>[] {
    const next = new Map(models.map((m) => [m.id, m]));
    const removed = [...this.models.keys()].filter((id) => !next.has(id));
    this.models = next;
    this.core.updatePolicy(this.modelPolicy());
    for (const id of removed) this.cooldown.forget(id);
    return removed.map(async (id) => {
      await this.unload(id, { force: false, reason: "config" }).catch((err: unknown) => {
        this.warn("config removal unload failed", { model: id, err: String(err) });
      });
    });
  }

  /** Changes a model's pin and groups live (UpdatePolicy); kept until the next config reload. */
  patchModel(id: string, patch: { readonly pinned: boolean; readonly groups: readonly string[] }): void {
    const spec = this.models.get(id);
    if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${id}" is not configured`);
    this.models.set(id, { ...spec, pinned: patch.pinned, groups: patch.groups });
    this.core.updatePolicy(this.modelPolicy());
  }

  private modelPolicy(): PolicyPatch {
    const groups: Record<string, readonly string[]> = {};
    const pinned: string[] = [];
    for (const m of this.models.values()) {
      if (m.groups.length > 0) groups[m.id] = m.groups;
      if (m.pinned) pinned.push(m.id);
    }
    return { modelGroups: groups, pinnedModels: pinned };
  }

  // ----------------------------------------------------------------- ticking

  /** Starts the watchdog tick on the injected clock (DESIGN §5: 500 ms). Ticks never await stops. */
  startTicking(): void {
    const loop = (): void => {
      if (this.closed) return;
      this.watchdog.tick();
      this.tickCancel = this.o.clock.setTimer(this.core.getPolicy().tickIntervalMs, loop);
    };
    this.tickCancel = this.o.clock.setTimer(this.core.getPolicy().tickIntervalMs, loop);
  }

  // ------------------------------------------------------------------ loads

  /**
   * Returns the model's ready instance, loading it if needed. Concurrent
   * calls coalesce on one load; a model in cooldown is refused with
   * RESOURCE_EXHAUSTED (details.retryAfterMs) before anything is evicted; a
   * failed leader gives its followers exactly one shared retry that bypasses
   * the cooldown. A model whose instance is pending eviction or freed waits
   * for the settle (DESIGN §3.4 item 9).
   */
  async ensureLoaded(modelId: string, signal: AbortSignal, nodeId?: string): Promise<HeldInstance<H>> {
    const spec = this.models.get(modelId);
    if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${modelId}" is not configured`, { details: { field: "model" } });
    const n = this.waiting.get(modelId) ?? 0;
    if (n >= this.maxWaiting) throw new WardenError(Code.ResourceExhausted, `model "${modelId}": ${String(n)} calls already waiting (cap ${String(this.maxWaiting)})`);
    this.waiting.set(modelId, n + 1);
    try {
      return await this.ensureLoadedInner(spec, signal, nodeId);
    } finally {
      const left = (this.waiting.get(modelId) ?? 1) - 1;
      if (left <= 0) this.waiting.delete(modelId);
      else this.waiting.set(modelId, left);
    }
  }

  private async ensureLoadedInner(spec: ModelSpec, signal: AbortSignal, nodeId: string | undefined): Promise<HeldInstance<H>> {
    let bypassCooldown = false;
    let followerRetryUsed = false;
    for (;;) {
      if (signal.aborted) throw WardenError.from(signal.reason);
      const inc = this.current.get(spec.id);
      if (inc !== undefined) {
        const h = this.held.get(inc);
        const v = this.core.instance(inc);
        if (h !== undefined && v !== undefined && v.pendingEviction === undefined && v.state === "ready" && h.phase === "ready") {
          // A cache hit counts as a use (LocalAI's UpdateLastUsed): an operator's
          // LoadModel of a loaded model moves it to the back of the LRU order.
          if (v.address !== undefined) this.core.updateLastUsed(v.address);
          return h;
        }
        if (v?.pendingEviction !== undefined || v?.state === "freed") {
          await this.waitForSettle(inc, signal);
          continue;
        }
      }
      const inflight = this.loads.get(spec.id);
      if (inflight !== undefined) {
        try {
          return await raceSignal(inflight, signal);
        } catch (err) {
          // TS narrows `signal.aborted` across the await; read it through a call.
          if (isAborted(signal) || followerRetryUsed) throw err;
          // A follower is not a new trigger: one retry that bypasses the cooldown.
          followerRetryUsed = true;
          bypassCooldown = true;
          continue;
        }
      }
      if (inc !== undefined && this.held.has(inc)) {
        // held but not ready and no load in flight: wait for whatever holds it
        await this.waitForSettle(inc, signal);
        continue;
      }
      if (!bypassCooldown) {
        const retryAfterMs = this.cooldown.retryAfterMs(spec.id, this.o.clock.now());
        if (retryAfterMs > 0) {
          throw new WardenError(Code.ResourceExhausted, `model "${spec.id}" is in load-failure cooldown; retry after ${String(Math.ceil(retryAfterMs))}ms`, {
            details: { model: spec.id, retryAfterMs: Math.ceil(retryAfterMs) },
          });
        }
      }
      const p = this.lead(spec, nodeId);
      this.loads.set(spec.id, p);
      const cleanup = (): void => {
        if (this.loads.get(spec.id) === p) this.loads.delete(spec.id);
      };
      p.then(cleanup, cleanup);
      return await raceSignal(p, signal);
    }
  }

  private waitForSettle(incarnation: string, signal: AbortSignal): Promise<void> {
    let w = this.settleWaiters.get(incarnation);
    if (w === undefined) {
      let resolve: () => void = () => {};
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      w = { promise, resolve };
      this.settleWaiters.set(incarnation, w);
    }
    return raceSignal(w.promise, signal);
  }

  private wakeSettleWaiters(incarnation: string): void {
    const w = this.settleWaiters.get(incarnation);
    if (w !== undefined) {
      this.settleWaiters.delete(incarnation);
      w.resolve();
    }
  }

  /** The leader of a load. Not tied to any caller's signal: followers may outlive the first caller. */
  private async lead(spec: ModelSpec, preferredNode: string | undefined): Promise<HeldInstance<H>> {
    const ctl = new AbortController();
    const deadline = deadlineSignal(this.o.clock, spec.loadTimeoutMs, `load of model "${spec.id}"`, ctl.signal);
    const incarnation = this.o.mintIncarnation();
    this.loadControllers.set(incarnation, ctl);
    const startedAtMs = this.o.clock.now();
    let nodeId: string | undefined;
    let registered = false;
    let h: HeldInstance<H> | undefined;
    let release: (() => void) | undefined;
    try {
      // Shared lifecycle lock for the whole load, admission included: a stop of
      // this model waits for it or times out; a stop never cancels a load.
      release = await this.locks.shared(spec.id, deadline.signal);
      if (this.o.admissionGate !== undefined) await raceSignal(this.o.admissionGate, deadline.signal);
      // Adopted while we waited at the gate: no second copy.
      const adopted = this.current.get(spec.id);
      const adoptedHeld = adopted === undefined ? undefined : this.held.get(adopted);
      if (adoptedHeld !== undefined && adoptedHeld.phase === "ready") {
        this.loadControllers.delete(incarnation);
        return adoptedHeld;
      }
      nodeId = await this.admit(spec, incarnation, preferredNode, deadline.signal);
      const agent = this.o.agents.agent(nodeId);
      if (agent === undefined) throw new WardenError(Code.Unavailable, `node "${nodeId}" has no connected agent`);
      h = {
        incarnation,
        model: spec.id,
        nodeId,
        spec,
        placement: this.o.agents.isLocal(nodeId) ? "local" : "local-remote",
        phase: "starting",
        address: undefined,
        backend: undefined,
        gpu: undefined,
        startedAtMs,
      };
      this.held.set(incarnation, h);
      this.current.set(spec.id, incarnation);
      let failure: StartEvent | undefined;
      const stream = agent.startBackend(
        { incarnation, model: spec.id, backend: spec.backend, options: spec.options, modelFile: spec.modelFile, contextSize: spec.contextSize },
        { signal: deadline.signal },
      );
      for await (const ev of stream) {
        switch (ev.t) {
          case "spawned":
            if (registered) break;
            h.address = ev.address;
            h.gpu = ev.gpu;
            h.phase = "loading";
            this.core.registerLoading({ nodeId, model: spec.id, incarnation, address: ev.address, groups: spec.groups, pinned: spec.pinned, sizeBytes: spec.sizeBytes, ...(ev.gpu === undefined ? {} : { gpu: ev.gpu }) });
            registered = true;
            break;
          case "loading":
            break;
          case "ready":
            if (h.address === undefined) h.address = ev.address;
            if (!registered) {
              this.core.registerLoading({ nodeId, model: spec.id, incarnation, address: ev.address, groups: spec.groups, pinned: spec.pinned, sizeBytes: spec.sizeBytes });
              registered = true;
            }
            h.backend = this.o.backends.connect(ev.address);
            h.phase = "ready";
            this.core.markReady(incarnation);
            break;
          case "failed":
            failure = ev;
            break;
        }
        if (failure !== undefined || h.phase === "ready") break;
      }
      if (failure?.t === "failed") {
        throw new WardenError(Code.FailedPrecondition, `load of model "${spec.id}" failed: ${failure.message}`, {
          details: { startFailure: failure.code, exitCode: failure.exitCode, lastStderrLine: failure.lastStderrLine },
        });
      }
      if (h.phase !== "ready") {
        if (deadline.signal.aborted) throw WardenError.from(deadline.signal.reason);
        throw new WardenError(Code.Unavailable, `load of model "${spec.id}": the agent ended the start without ready`);
      }
      this.cooldown.recordSuccess(spec.id);
      this.o.events.emit({ type: "backend.loaded", nodeId, model: spec.id, address: h.address ?? "", incarnation, loadDurationMs: Math.round(this.o.clock.now() - startedAtMs) });
      return h;
    } catch (err) {
      const e = WardenError.from(err);
      this.failLoad(spec, incarnation, nodeId, h, registered, e, ctl.signal.aborted);
      throw e;
    } finally {
      release?.();
      deadline.cleanup();
      this.loadControllers.delete(incarnation);
    }
  }

  /** Every failed load leaves nothing behind: no watchdog entry, no held entry, no reservation; a spawned process is stopped. */
  private failLoad(spec: ModelSpec, incarnation: string, nodeId: string | undefined, h: HeldInstance<H> | undefined, registered: boolean, e: WardenError, cancelled: boolean): void {
    const address = h?.address ?? "";
    const pendingStop = registered && this.core.instance(incarnation)?.pendingEviction !== undefined;
    if (!pendingStop) {
      this.dropHeld(incarnation);
      if (registered) this.core.remove(incarnation);
      else this.core.releaseReservation(incarnation);
    } else {
      // The load is over, so it no longer counts for hasModelAtAddress: the
      // pending stop settles by row 2, or row 4 (leftover, retried) if it
      // fails — never row 3, which would re-register a "loading" instance
      // that nothing will ever finish.
      this.dropHeld(incarnation);
    }
    // A start cancelled on our side (unload, shutdown) is not a load failure: no cooldown.
    if (nodeId !== undefined && e.code !== Code.ResourceExhausted && !cancelled) {
      this.cooldown.recordFailure(spec.id, this.o.clock.now());
    }
    if (nodeId !== undefined) {
      this.o.events.emit({
        type: "backend.load-failed",
        nodeId,
        model: spec.id,
        address,
        incarnation,
        code: typeof e.details["startFailure"] === "string" ? e.details["startFailure"] : String(e.code),
        message: e.rawMessage,
        exitCode: typeof e.details["exitCode"] === "number" ? e.details["exitCode"] : undefined,
        lastStderrLine: typeof e.details["lastStderrLine"] === "string" ? e.details["lastStderrLine"] : "",
      });
    }
    // A start abandoned on our side (deadline) may leave a process: stop it, and
    // track it as a leftover if that fails, so it is never forgotten.
    if (registered && address !== "" && nodeId !== undefined && !pendingStop && (e.code === Code.DeadlineExceeded || e.code === Code.Canceled || e.code === Code.Unavailable)) {
      // Accounted as a leftover at once (never a gap where it counts nowhere);
      // the tracker's retry stops it and reports it reaped.
      void this.o.journal.recordStopIntent({ incarnation, nodeId, model: spec.id, address, reason: "load-abandoned" }).catch((err: unknown) => {
        this.warn("could not journal the stop intent of an abandoned load", { incarnation, err: String(err) });
      });
      this.leftovers.add({ incarnation, nodeId, model: spec.id, address, groups: spec.groups, sizeBytes: spec.sizeBytes, lastError: `load abandoned: ${e.rawMessage}` });
    }
  }

  /**
   * Admission with the need-more retry loop (localai-semantics §4.2),
   * re-planning placement on every attempt. Pending evictions settle before an
   * attempt resolves. When attempts run out the load fails with
   * FAILED_PRECONDITION naming what blocks it.
   */
  private async admit(spec: ModelSpec, incarnation: string, preferredNode: string | undefined, signal: AbortSignal): Promise<string> {
    let lastReason: string;
    for (let attempt = 1; ; attempt++) {
      if (signal.aborted) throw WardenError.from(signal.reason);
      const choice = preferredNode === undefined ? this.o.placement.choose(spec) : { nodeId: preferredNode };
      let needMore = true;
      if (choice.nodeId === undefined) {
        lastReason = choice.reason;
      } else {
        const r = await this.watchdog.admit({ nodeId: choice.nodeId, model: spec.id, incarnation, groups: spec.groups, pinned: spec.pinned, sizeBytes: spec.sizeBytes });
        if (r.t === "admitted") {
          if (r.limitExceeded !== undefined) {
            this.o.events.emit({
              type: "policy.limit-exceeded",
              nodeId: choice.nodeId,
              model: spec.id,
              address: "",
              incarnation,
              limit: r.limitExceeded.limit,
              occupied: r.limitExceeded.occupied,
              pinned: r.limitExceeded.pinnedIncarnations.length,
            });
          }
          return choice.nodeId;
        }
        needMore = r.needMore;
        lastReason = `${r.cause === "group" ? "group conflict" : "limit"} on node "${choice.nodeId}": ${describeShortfall(r.shortfall)}`;
      }
      if (attempt >= this.maxAttempts) break;
      if (needMore) await this.o.sleep(this.retryIntervalMs, signal);
    }
    throw new WardenError(Code.FailedPrecondition, `cannot load model "${spec.id}" after ${String(this.maxAttempts)} attempts: ${lastReason}`, { details: { model: spec.id } });
  }

  // ---------------------------------------------------------------- routing

  /**
   * Routes one call: ensures the model is loaded, looks it up under the shared
   * lifecycle lock (released at once — calls are counted by the watchdog, not
   * held on the lock) and starts tracking the call. `complete()` ends it
   * (idempotent); a remote-only instance becomes local+remote here.
   */
  async acquire(modelId: string, signal: AbortSignal): Promise<Lease<H>> {
    for (;;) {
      const h = await this.ensureLoaded(modelId, signal);
      if (this.o.agents.isReachable?.(h.nodeId) === false) {
        // Accounted, not routable: the node's fate is unknown until it is back or lost.
        throw new WardenError(Code.Unavailable, `model "${modelId}" is on node "${h.nodeId}", which is unreachable; retry later`, { details: { nodeId: h.nodeId } });
      }
      const release = await this.locks.shared(modelId, signal);
      try {
        const v = this.core.instance(h.incarnation);
        if (this.held.get(h.incarnation) === h && h.address !== undefined && v !== undefined && v.state === "ready" && v.pendingEviction === undefined) {
          const backend = h.backend ?? this.o.backends.connect(h.address);
          h.backend = backend;
          if (h.placement === "remote-only") h.placement = "local-remote";
          const complete = this.core.trackRequest(h.address);
          return { incarnation: h.incarnation, nodeId: h.nodeId, address: h.address, model: h.model, backend, complete };
        }
      } finally {
        release();
      }
    }
  }

  /**
   * A routed call saw UNAVAILABLE: the process is gone. Remove it through the
   * normal path (an explicit `health` stop, force) so nothing is left behind.
   */
  async reportUnavailable(incarnation: string): Promise<void> {
    const h = this.held.get(incarnation);
    if (h === undefined) return;
    await this.watchdog.stop(incarnation, { reason: "health", force: true });
  }

  // ------------------------------------------------------------- unloading

  /**
   * Unloads a model and returns the real outcome. A failure at the lifecycle
   * lock or the busy wait throws DEADLINE_EXCEEDED with LocalAI's message; a
   * failed StopBackend returns `registered-again` (local) or `leftover`.
   */
  async unload(modelId: string, options: { readonly force: boolean; readonly stopTimeoutMs?: number; readonly reason?: ExplicitStopOptions["reason"] }): Promise<UnloadOutcome> {
    const inc = this.current.get(modelId);
    if (inc === undefined || this.core.instance(inc) === undefined) {
      if (this.loads.has(modelId)) {
        // A load in progress, not spawned yet: it holds the lifecycle lock.
        await this.awaitLoadLock(modelId, options.stopTimeoutMs);
        return this.unload(modelId, options);
      }
      return this.unloadRemoteOnly(modelId, options);
    }
    return this.stopInstance(inc, options);
  }

  /** Stops one instance by incarnation through the watchdog. */
  async stopInstance(incarnation: string, options: { readonly force: boolean; readonly stopTimeoutMs?: number; readonly reason?: ExplicitStopOptions["reason"] }): Promise<UnloadOutcome> {
    if (options.stopTimeoutMs !== undefined && options.stopTimeoutMs > 0) this.stopOverrides.set(incarnation, { stopTimeoutMs: options.stopTimeoutMs });
    try {
      const r = await this.watchdog.stop(incarnation, { reason: options.reason ?? "admin", force: options.force });
      switch (r.t) {
        case "unknown":
          return { t: "not-loaded" };
        case "pending-elsewhere":
          // Every stop goes through this facade; joining is the safe answer anyway.
          await this.waitForSettle(incarnation, new AbortController().signal);
          return { t: "stopped", incarnation };
        case "reserved": {
          // Admitted, not spawned: the load holds the lifecycle lock. A stop never
          // cancels a load (DESIGN §3.4 item 2): wait for it within the deadline.
          const model = this.held.get(incarnation)?.model ?? this.core.instance(incarnation)?.model;
          if (model === undefined) return { t: "not-loaded" };
          await this.awaitLoadLock(model, options.stopTimeoutMs);
          return await this.unload(model, options);
        }
        case "settled": {
          const res = r.report.result;
          const outcome = r.report.outcome;
          const error = outcome.t === "failed" ? outcome.message : "";
          switch (res.row) {
            case 0:
            case 1:
            case 2:
              return { t: "stopped", incarnation };
            case 3:
              if (outcome.t === "failed" && outcome.code === Code.DeadlineExceeded && this.stopFailedAtLock.delete(incarnation)) {
                throw new WardenError(Code.DeadlineExceeded, error);
              }
              return { t: "registered-again", incarnation, error };
            case 4:
              return { t: "leftover", incarnation, error };
          }
        }
      }
    } finally {
      this.stopOverrides.delete(incarnation);
      this.stopFailedAtLock.delete(incarnation);
    }
  }

  /** Waits for a load of `model` to release the lifecycle lock, or throws LocalAI's lock message at the deadline. */
  private async awaitLoadLock(model: string, stopTimeoutMs: number | undefined): Promise<void> {
    const timeoutMs = stopTimeoutMs !== undefined && stopTimeoutMs > 0 ? stopTimeoutMs : this.timings.stopTimeoutMs;
    const deadline = deadlineSignal(this.o.clock, timeoutMs, `stop of model "${model}"`);
    try {
      const release = await this.locks.exclusive(model, deadline.signal);
      release();
    } catch {
      throw new WardenError(Code.DeadlineExceeded, `waiting to shut down model "${model}": context deadline exceeded`);
    } finally {
      deadline.cleanup();
    }
  }

  /**
   * True when a routed call's failure is explained by a stop of its instance
   * (pending eviction, or already dropped): the call is not retried then.
   */
  isBeingStopped(incarnation: string): boolean {
    return this.gone.has(incarnation) || this.leftovers.get(incarnation) !== undefined || this.core.instance(incarnation)?.pendingEviction !== undefined;
  }

  /** True when this incarnation is known gone for good (never adopted, listed or stopped again). */
  isGone(incarnation: string): boolean {
    return this.gone.has(incarnation);
  }

  /** Remembers a confirmed-gone incarnation and tells the inventories, which fence older reports of it. */
  private rememberGone(incarnation: string, nodeId: string): void {
    this.gone.add(incarnation);
    this.o.inventories.confirmedGone?.(nodeId, incarnation);
  }

  /**
   * DESIGN §3.3: a model the loader does not hold. Ask the inventories first;
   * "unknown" (an unreachable node's last inventory had it) is an error, never
   * not-found.
   */
  private async unloadRemoteOnly(modelId: string, options: { readonly force: boolean; readonly stopTimeoutMs?: number; readonly reason?: ExplicitStopOptions["reason"] }): Promise<UnloadOutcome> {
    const answer = this.o.inventories.findModel(modelId);
    // Leftovers of this model the loader already tracks, on any node — one
    // restored from the journal on a node that has not registered yet included.
    let known: UnloadOutcome | undefined;
    for (const l of this.leftovers.ofModel(modelId)) {
      this.leftovers.retryNodeNow(l.nodeId);
      known = { t: "leftover", incarnation: l.incarnation, error: "stop already being retried" };
    }
    switch (answer.t) {
      case "absent":
        return known ?? { t: "not-loaded" };
      case "unknown":
        throw new WardenError(Code.Unavailable, `checking whether model "${modelId}" is loaded on any node: ${answer.reason}`);
      case "found": {
        let last: UnloadOutcome = known ?? { t: "not-loaded" };
        for (const hit of answer.hits) {
          // Confirmed gone by an earlier stop: the inventory predates it.
          if (this.gone.has(hit.incarnation)) continue;
          if (this.leftovers.get(hit.incarnation) !== undefined) {
            // Already a leftover (retried above): never adopt it as routable.
            last = { t: "leftover", incarnation: hit.incarnation, error: "stop already being retried" };
            continue;
          }
          const spec = this.models.get(modelId);
          if (spec !== undefined) this.adoptRemoteOnly(spec, hit.nodeId, hit.address, hit.incarnation, "inventory");
          else {
            // Not configured any more: stop it directly, as a leftover would be.
            this.adoptLeftover({ incarnation: hit.incarnation, nodeId: hit.nodeId, model: modelId, address: hit.address, lastError: "model not configured; stop retried", foundBy: "unconfigured" });
            last = { t: "leftover", incarnation: hit.incarnation, error: "model not configured; stop retried" };
            continue;
          }
          last = await this.stopInstance(hit.incarnation, options);
        }
        return last;
      }
    }
  }

  /**
   * Adopts an instance found only in a node's inventory as remote-only
   * (routable once first routed, when it becomes local+remote).
   */
  adoptRemoteOnly(spec: ModelSpec, nodeId: string, address: string, incarnation: string, foundBy: AdoptionSource = "inventory"): boolean {
    if (this.held.has(incarnation) || this.core.instance(incarnation) !== undefined || this.leftovers.get(incarnation) !== undefined || this.gone.has(incarnation)) return false;
    const h: HeldInstance<H> = { incarnation, model: spec.id, nodeId, spec, placement: "remote-only", phase: "ready", address, backend: undefined, gpu: undefined, startedAtMs: this.o.clock.now() };
    this.held.set(incarnation, h);
    if (!this.current.has(spec.id)) this.current.set(spec.id, incarnation);
    this.core.registerReady({ nodeId, model: spec.id, incarnation, address, groups: spec.groups, pinned: spec.pinned, sizeBytes: spec.sizeBytes });
    this.o.events.emit({ type: "instance.adopted", nodeId, model: spec.id, address, incarnation, asLeftover: false, foundBy });
    return true;
  }

  /**
   * Adopts an instance as a leftover (stop requested, an open stop intent, a
   * model no longer configured): accounted, never routed, stop retried.
   * False (nothing changes) when the loader already tracks it or knows it gone.
   */
  adoptLeftover(init: { readonly incarnation: string; readonly nodeId: string; readonly model: string; readonly address: string; readonly lastError: string; readonly foundBy: AdoptionSource }): boolean {
    const inc = init.incarnation;
    if (this.held.has(inc) || this.core.instance(inc) !== undefined || this.leftovers.get(inc) !== undefined || this.gone.has(inc)) return false;
    const spec = this.models.get(init.model);
    this.leftovers.add({ incarnation: inc, nodeId: init.nodeId, model: init.model, address: init.address, lastError: init.lastError, groups: spec?.groups ?? [], sizeBytes: spec?.sizeBytes ?? 0 });
    this.o.events.emit({ type: "instance.adopted", nodeId: init.nodeId, model: init.model, address: init.address, incarnation: inc, asLeftover: true, foundBy: init.foundBy });
    return true;
  }

  /**
   * At start: every open stop intent of the journal is a leftover on its
   * node at once — accounted (memory, LRU count, groups), listed, answered by
   * UnloadModel — whether or not its node has registered yet. Its node's
   * first inventory reaps it (absent) or its stop is retried (present).
   */
  restoreStopIntents(intents: readonly { readonly incarnation: string; readonly nodeId: string; readonly model: string; readonly address: string }[]): number {
    let adopted = 0;
    for (const i of intents) {
      if (this.adoptLeftover({ incarnation: i.incarnation, nodeId: i.nodeId, model: i.model, address: i.address, lastError: "open stop intent restored at start", foundBy: "journal" })) adopted++;
    }
    return adopted;
  }

  /** Retries the stops of a node's leftovers now (its agent just became reachable). */
  retryLeftoversNow(nodeId: string): void {
    this.leftovers.retryNodeNow(nodeId);
  }

  /** True when the loader tracks this incarnation in any form. */
  knows(incarnation: string): boolean {
    return this.held.has(incarnation) || this.leftovers.get(incarnation) !== undefined || this.core.instance(incarnation) !== undefined || this.gone.has(incarnation);
  }

  /**
   * The agent reported the process gone (exit, or vanished from its
   * inventory): remove it through the watchdog — no phantom.
   */
  onBackendGone(incarnation: string, info: { exitCode: number | undefined; signal: string; intentional: boolean; lastStderrLine: string }): void {
    const left = this.leftovers.get(incarnation);
    if (left !== undefined) {
      this.leftovers.remove(incarnation);
      this.rememberGone(incarnation, left.nodeId);
      void this.o.journal.clearStopIntent(incarnation).catch(() => undefined);
      this.o.events.emit({ type: "leftover.reaped", ...this.base(left), attempts: left.attempts });
      return;
    }
    const h = this.held.get(incarnation);
    if (h === undefined) return;
    if (h.phase !== "ready") return; // the start stream reports the failure itself
    const r = this.core.remove(incarnation);
    if (r.t === "pending") return; // the stop in flight settles it (row 2: already gone)
    this.cancelFreedRetry(incarnation);
    this.dropHeld(incarnation);
    this.rememberGone(incarnation, h.nodeId);
    this.o.events.emit({ type: "backend.exited", nodeId: h.nodeId, model: h.model, address: h.address ?? "", incarnation, ...info });
  }

  /**
   * A node was declared lost: its instances become leftovers there (still
   * accounted on that node, stops retried should it come back) and their
   * models may be placed elsewhere. Nothing is forgotten.
   */
  onNodeLost(nodeId: string): void {
    for (const h of [...this.held.values()]) {
      if (h.nodeId !== nodeId) continue;
      const v = this.core.instance(h.incarnation);
      if (v?.pendingEviction !== undefined) continue; // its stop settles it
      this.core.remove(h.incarnation);
      this.cancelFreedRetry(h.incarnation);
      this.dropHeld(h.incarnation);
      if (h.address !== undefined) {
        this.leftovers.add({ incarnation: h.incarnation, nodeId, model: h.model, address: h.address, groups: h.spec.groups, sizeBytes: h.spec.sizeBytes, lastError: `node "${nodeId}" lost` });
      }
    }
  }

  /** An operator's audited word: forget a leftover or an instance on a node gone for good. Never stops anything. */
  forget(incarnation: string, operator: string, note: string): boolean {
    const left = this.leftovers.remove(incarnation);
    const h = this.held.get(incarnation);
    const v = this.core.instance(incarnation);
    if (left === undefined && h === undefined && v === undefined) return false;
    if (v !== undefined && v.pendingEviction === undefined) this.core.remove(incarnation);
    this.cancelFreedRetry(incarnation);
    if (h !== undefined) this.dropHeld(incarnation);
    void this.o.journal.clearStopIntent(incarnation).catch(() => undefined);
    const base = left !== undefined ? this.base(left) : { nodeId: h?.nodeId ?? v?.nodeId ?? "", model: h?.model ?? v?.model ?? "", address: h?.address ?? v?.address ?? "", incarnation };
    this.o.events.emit({ type: "instance.forgotten", ...base, operator, note });
    return true;
  }

  // ----------------------------------------------------------- stop sequence

  /**
   * DESIGN §3.3, for one selected victim: (1) exclusive lifecycle lock within
   * the stop deadline; (2) graceful: busy wait on the watchdog's in-flight
   * count; (3) graceful: Free() — the only Free of a stop; (4) stop intent,
   * durable; (5) local+remote / remote-only: drop the local half; (6)
   * StopBackend(address, incarnation, force). Resolves with the outcome; the
   * watchdog settles it in the same turn.
   */
  private async stopSequence(c: StopCommand): Promise<StopOutcome> {
    await this.o.events.emitDurable({
      type: "eviction.started",
      nodeId: c.nodeId,
      model: c.model,
      address: c.address,
      incarnation: c.incarnation,
      reason: c.reason,
      trigger: c.trigger ?? "",
      wasBusy: c.wasBusy,
      force: c.force,
      openRequestIds: c.openRequestIds.map(String),
    });
    // The flag describes this stop only: a stale one (from a stop that did not go through stopInstance) would misreport it.
    this.stopFailedAtLock.delete(c.incarnation);
    const stopTimeoutMs = this.stopOverrides.get(c.incarnation)?.stopTimeoutMs ?? this.timings.stopTimeoutMs;
    const deadline = deadlineSignal(this.o.clock, stopTimeoutMs, `stop of model "${c.model}"`);
    let freed = false;
    try {
      // (1) lifecycle lock
      let release: () => void;
      try {
        release = await this.locks.exclusive(c.model, deadline.signal);
      } catch {
        this.stopFailedAtLock.add(c.incarnation);
        return { t: "failed", message: `waiting to shut down model "${c.model}": context deadline exceeded`, code: Code.DeadlineExceeded, freed: false };
      }
      try {
        const h = this.held.get(c.incarnation);
        if (!c.force && c.address !== "") {
          // (2) busy wait
          while (this.core.inFlight(c.address) > 0) {
            if (deadline.signal.aborted) {
              this.stopFailedAtLock.add(c.incarnation);
              return { t: "failed", message: `model is still busy: ${c.model}: context deadline exceeded`, code: Code.DeadlineExceeded, freed: false };
            }
            await this.o.sleep(this.timings.busyPollMs, deadline.signal).catch(() => undefined);
          }
          // (3) Free, capped; UNIMPLEMENTED is fine and any error only logged.
          if (h?.backend !== undefined) {
            try {
              await h.backend.free({ signal: deadline.signal, timeoutMs: this.timings.freeTimeoutMs });
              freed = true;
            } catch (err) {
              if (!isWardenError(err, Code.Unimplemented)) this.warn("Free failed; stopping anyway", { model: c.model, incarnation: c.incarnation, err: String(err) });
            }
          }
        }
        // (4) stop intent, durable before anything is dropped or sent
        await this.o.journal.recordStopIntent({ incarnation: c.incarnation, nodeId: c.nodeId, model: c.model, address: c.address, reason: c.reason });
        // (5) drop the local half of a remote placement first, so a failed
        // StopBackend leaves no phantom (settle row 4 → leftover)
        const placement = h?.placement ?? "remote-only";
        if (placement !== "local") this.dropHeld(c.incarnation);
        // (6) StopBackend
        const agent = this.o.agents.agent(c.nodeId);
        try {
          if (agent === undefined) throw new WardenError(Code.Unavailable, `node "${c.nodeId}" has no connected agent`);
          const rpc = new AbortController();
          const ans = await agent.stopBackend({ address: c.address, incarnation: c.incarnation, force: c.force, reason: c.reason }, { signal: rpc.signal, timeoutMs: this.timings.stopRpcTimeoutMs });
          if (placement === "local") this.dropHeld(c.incarnation);
          await this.clearIntent(c.incarnation);
          return ans.t === "stopped" ? { t: "stopped" } : { t: "alreadyGone" };
        } catch (err) {
          const e = WardenError.from(err);
          if (e.code === Code.NotFound) {
            if (placement === "local") this.dropHeld(c.incarnation);
            await this.clearIntent(c.incarnation);
            return { t: "alreadyGone" };
          }
          if (placement === "local" && agent !== undefined) {
            // An already-dead process owns no resources: row 2. Alive: keep it, row 3.
            const alive = await agent.isRunning(c.incarnation, { signal: new AbortController().signal }).catch(() => true);
            if (!alive) {
              this.dropHeld(c.incarnation);
              await this.clearIntent(c.incarnation);
              return { t: "stopped" };
            }
            await this.clearIntent(c.incarnation);
          }
          // local alive → row 3 (held); remote → row 4 (dropped), intent kept until reaped
          return { t: "failed", message: e.rawMessage, code: e.code, freed, bug: e.code === Code.InvalidArgument || e.code === Code.PermissionDenied };
        }
      } finally {
        release();
      }
    } catch (err) {
      const e = WardenError.from(err);
      return { t: "failed", message: e.rawMessage, code: e.code, freed };
    } finally {
      deadline.cleanup();
    }
  }

  private async clearIntent(incarnation: string): Promise<void> {
    await this.o.journal.clearStopIntent(incarnation).catch((err: unknown) => {
      this.warn("could not clear stop intent", { incarnation, err: String(err) });
    });
  }

  private onSettled(r: SettleReport): void {
    const c = r.command;
    const res = r.result;
    const base = { nodeId: c.nodeId, model: c.model, address: c.address, incarnation: c.incarnation };
    switch (res.row) {
      case 0:
      case 1:
        break;
      case 2:
        this.rememberGone(c.incarnation, c.nodeId);
        this.cancelFreedRetry(c.incarnation);
        this.dropHeld(c.incarnation);
        this.o.events.emit({ type: "eviction.stopped", ...base, reason: c.reason, alreadyGone: r.outcome.t === "alreadyGone" });
        break;
      case 3:
        this.o.events.emit({ type: "eviction.failed", ...base, reason: c.reason, error: res.error, outcome: "registered-again", openRequestIds: [], terminalReason: "" });
        if (res.state === "freed") this.scheduleFreedRetry(c.incarnation);
        break;
      case 4: {
        this.cancelFreedRetry(c.incarnation);
        this.dropHeld(c.incarnation);
        const spec = this.models.get(c.model);
        this.leftovers.add({ incarnation: c.incarnation, nodeId: c.nodeId, model: c.model, address: c.address, groups: spec?.groups ?? res.instance.groups, sizeBytes: spec?.sizeBytes ?? res.instance.sizeBytes, lastError: res.error });
        this.o.events.emit({ type: "eviction.failed", ...base, reason: c.reason, error: res.error, outcome: "leftover", openRequestIds: res.openRequestIds.map(String), terminalReason: res.terminalReason });
        break;
      }
    }
    this.wakeSettleWaiters(c.incarnation);
  }

  /** A `freed` instance (Free succeeded, stop failed) is retried with the leftover backoff until stopped. */
  private scheduleFreedRetry(incarnation: string): void {
    const prev = this.freedRetries.get(incarnation);
    const attempts = (prev?.attempts ?? 0) + 1;
    prev?.cancel();
    const delayMs = backoffDelayMs(this.o.leftoverBackoff ?? leftoverBackoff, attempts - 1, this.o.rng);
    const cancel = this.o.clock.setTimer(delayMs, () => {
      if (this.closed) return;
      void this.watchdog.stop(incarnation, { reason: "retry", force: true });
    });
    this.freedRetries.set(incarnation, { attempts, cancel });
  }

  private cancelFreedRetry(incarnation: string): void {
    const r = this.freedRetries.get(incarnation);
    if (r !== undefined) {
      r.cancel();
      this.freedRetries.delete(incarnation);
    }
  }

  private async retryLeftover(l: Leftover): Promise<{ readonly gone: true } | { readonly gone: false; readonly error: string }> {
    const agent = this.o.agents.agent(l.nodeId);
    if (agent === undefined) return { gone: false, error: `node "${l.nodeId}" has no connected agent` };
    try {
      await agent.stopBackend({ address: l.address, incarnation: l.incarnation, force: true, reason: "leftover" }, { signal: new AbortController().signal, timeoutMs: this.timings.stopRpcTimeoutMs });
    } catch (err) {
      const e = WardenError.from(err);
      if (e.code !== Code.NotFound) return { gone: false, error: e.rawMessage };
    }
    await this.clearIntent(l.incarnation);
    return { gone: true };
  }

  private dropHeld(incarnation: string): void {
    const h = this.held.get(incarnation);
    if (h === undefined) return;
    this.held.delete(incarnation);
    if (this.current.get(h.model) === incarnation) this.current.delete(h.model);
    h.backend?.close();
    h.backend = undefined;
  }

  private base(l: Leftover): { nodeId: string; model: string; address: string; incarnation: string } {
    return { nodeId: l.nodeId, model: l.model, address: l.address, incarnation: l.incarnation };
  }

  private warn(msg: string, meta: Record<string, unknown>): void {
    this.o.onWarning?.(msg, meta);
  }

  /** A consistent view for ListModels. */
  snapshot(): { instances: (InstanceView & { placement: string; backend: string })[]; leftovers: Leftover[] } {
    const s = this.core.snapshot();
    return {
      instances: s.instances.map((v) => ({ ...v, placement: this.held.get(v.incarnation)?.placement ?? "remote-only", backend: this.models.get(v.model)?.backend ?? "" })),
      leftovers: this.leftovers.list(),
    };
  }

  /** Stops timers; does not stop backends (the caller decides, DESIGN §2). */
  close(): void {
    this.closed = true;
    this.tickCancel?.();
    this.leftovers.close();
    for (const r of this.freedRetries.values()) r.cancel();
    this.freedRetries.clear();
    for (const ctl of this.loadControllers.values()) ctl.abort(new WardenError(Code.Canceled, "coordinator shutting down"));
  }
}

function describeShortfall(s: Shortfall): string {
  const parts: string[] = [];
  if (s.busy > 0) parts.push(`${String(s.busy)} busy`);
  if (s.loading > 0) parts.push(`${String(s.loading)} loading`);
  if (s.reserved > 0) parts.push(`${String(s.reserved)} reserved`);
  if (s.pending > 0) parts.push(`${String(s.pending)} pending eviction`);
  if (s.freed > 0) parts.push(`${String(s.freed)} freed`);
  if (s.leftovers > 0) parts.push(`${String(s.leftovers)} leftover`);
  if (s.orphans > 0) parts.push(`${String(s.orphans)} orphan`);
  if (s.pinned > 0) parts.push(`${String(s.pinned)} pinned`);
  return parts.length > 0 ? `blocked by ${parts.join(", ")} instance(s)` : `${String(s.missing)} more slot(s) needed`;
}

function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}

