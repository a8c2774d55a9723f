import { Code, WardenError, type Cancel } from "@warden/common";
import type { InstanceView, MemoryReading, OccupancyEntry, PolicyPatch, WatchdogPolicy } from "@warden/watchdog";
import { adoptLeftover, adoptRemoteOnly, restoreStopIntents } from "./adoption.js";
import { drainNode, type DrainOptions } from "./drain-node.js";
import { forget, onBackendGone, onNodeLost } from "./instance-exits.js";
import type { Leftover } from "./leftover-tracker.js";
import { ensureLoaded } from "./load-path.js";
import type { AdoptionSource } from "./loader-event.js";
import { modelPolicy } from "./loader-assembly.js";
import { pushAllOccupancy, pushOccupancy, warn } from "./loader-state.js";
import type { HeldInstance, Lease, RouteHint, UnloadOutcome } from "./loader-types.js";
import type { ModelSpec, ReplicaSettings } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { carryScaleOverrides, validateScale } from "./replica-settings.js";
import type { ReplicaStatus, ScalePatch } from "./replica-status.js";
import { replicaStatusOf, replicaStatusesOf } from "./replica-status-of.js";
import { endRollout, modelRules, reconcileEveryModel, reconcileReplicas } from "./replica-tick.js";
import type { ReplicaPassWork } from "./replica-work.js";
import { acquire, acquireNow, reportUnavailable } from "./routing.js";
import { forgetUnconfirmed } from "./journal-replicas.js";
import { stopInstance, unload, type UnloadOptions } from "./unload.js";
import { LoaderQueries } from "./loader-queries.js";

export { defaultStopTimings } from "./loader-options.js";
export type { LoaderOptions, StopTimings } from "./loader-options.js";

/**
 * The coordinator's loader (DESIGN §3.3): holds the local half of every
 * instance, runs loads (coalesced, cooldown-checked, admitted through the
 * watchdog with the need-more retry loop, bounded by a deadline), runs the
 * stop sequence for every eviction path, routes calls with watchdog tracking,
 * and retries leftovers. A decision package: every effect goes through a port.
 *
 * One owner: the Loader owns its internal state (`LoaderState`); the rules
 * live in files named after them — load-path, stop-sequence, routing,
 * unload, adoption, instance-exits — and get that state passed explicitly.
 * The held-instance table and the model → incarnation index are mutated
 * synchronously, never across an await between a read and the write that
 * depends on it. The state is built, and read, in the base class
 * (loader-queries.ts).
 */
export class Loader<H extends BackendHandle = BackendHandle> extends LoaderQueries<H> {
  private tickCancel: Cancel | undefined;

  // ----------------------------------------------------------------- inputs

  /** Holds (or resumes) the idle, busy and memory evictions on a node whose agent is unreachable (WatchdogCore.holdEvictions). */
  holdEvictionsOn(nodeId: string, held: boolean): void {
    this.core.holdEvictions(nodeId, held);
  }

  /** Applies live (DESIGN §3.4 item 6); validated as a whole. */
  updatePolicy(patch: PolicyPatch): WatchdogPolicy {
    return this.core.updatePolicy(patch);
  }

  /** Memory readings from a node's heartbeat (DESIGN §3.4 item 7). */
  reportMemory(nodeId: string, reading: MemoryReading): void {
    this.core.reportMemory(nodeId, reading);
  }

  /** Orphans on a node (from the reconciler): counted, never selectable. */
  setOrphans(nodeId: string, entries: readonly OccupancyEntry[]): void {
    if (entries.length === 0) this.s.orphans.delete(nodeId);
    else this.s.orphans.set(nodeId, entries);
    pushOccupancy(this.s, nodeId);
  }

  /**
   * One node id per instance of `model` its node reports starting that this
   * coordinator does not know (a previous leader's load, or its own before a restart: the `unconfirmed`
   * entries of setOrphans). Replica counting needs them as much as groups
   * and the limit do: until it is ready such a load is a replica of its node.
   */
  *startingElsewhere(model: string): IterableIterator<string> {
    for (const [nodeId, entries] of this.s.orphans) for (const e of entries) if (e.kind === "unconfirmed" && e.model === model) yield nodeId;
  }

  /**
   * Replaces the model table (config reload). Pins and groups apply live;
   * models that disappeared are unloaded gracefully with reason `config`.
   */
  setModels(models: readonly ModelSpec[]): Promise<void>[] {
    const next = new Map(models.map((m) => [m.id, m]));
    const removed = [...this.s.models.keys()].filter((id) => !next.has(id));
    carryScaleOverrides(this.s.scaleOverrides, next);
    this.s.models = next;
    this.core.updatePolicy(modelPolicy(this.s.models));
    this.core.setModelRules(modelRules(this.s.models));
    pushAllOccupancy(this.s);
    for (const id of removed) {
      this.s.cooldown.forget(id);
      endRollout(this.s, id);
    }
    return removed.map(async (id) => {
      await this.unload(id, { force: false, reason: "config" }).catch((err: unknown) => {
        warn(this.s, "config removal unload failed", { model: id, err: String(err) });
      });
    });
  }

  /** Changes a model's pin and groups live (UpdatePolicy); kept until the next config reload. */
  patchModel(id: string, patch: { readonly pinned: boolean; readonly groups: readonly string[] }): void {
    const spec = this.s.models.get(id);
    if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${id}" is not configured`);
    this.s.models.set(id, { ...spec, pinned: patch.pinned, groups: patch.groups });
    this.s.replicaWork.mark(id);
    this.core.updatePolicy(modelPolicy(this.s.models));
    pushAllOccupancy(this.s);
  }

  // --------------------------------------------------------------- replicas

  /**
   * ScaleModel: sets a model's replica `min`/`max` live, validated
   * as a whole (NOT_FOUND naming `model`; INVALID_ARGUMENT naming `min` or
   * `max` unless 0 ≤ min ≤ max and 1 ≤ max ≤ replicaBounds.maxReplicas) —
   * a rejection changes nothing. Audited as `replica.scale-set` (with `actor`, who asked). The override
   * is kept across config reloads unless the reloaded config changes that
   * model's `replicas` (then the config wins; replica-settings.ts).
   */
  scale(model: string, patch: ScalePatch, operator: string, actor?: string): ReplicaSettings {
    const spec = this.s.models.get(model);
    const next = validateScale(spec, model, patch);
    if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${model}" is not configured`);
    const configReplicas = this.s.scaleOverrides.get(model)?.configReplicas ?? spec.replicas;
    this.s.scaleOverrides.set(model, { min: next.min, max: next.max, configReplicas });
    this.s.models.set(model, { ...spec, replicas: next });
    this.s.replicaWork.mark(model);
    this.core.setModelRules(modelRules(this.s.models));
    this.s.o.events.emit({ type: "replica.scale-set", nodeId: "", model, address: "", incarnation: "", operator, min: next.min, max: next.max, ...(actor === undefined ? {} : { actor }) });
    return next;
  }

  /** One model's replica counts and settings; undefined when it is not configured. */
  replicaStatus(model: string): ReplicaStatus | undefined {
    return replicaStatusOf(this.s, model, this.s.leftovers.ofModel(model).length);
  }

  /** Every configured model's replica counts, in config order (ListModels, metrics). */
  replicaStatuses(): ReplicaStatus[] {
    return replicaStatusesOf(this.s);
  }

  // ----------------------------------------------------------------- ticking

  /** Starts the watchdog tick on the injected clock (DESIGN §5: 500 ms). Ticks never await stops. */
  startTicking(): void {
    const loop = (): void => {
      if (this.s.closed) return;
      // HA: not the leader at this moment (see `mayAct`): this turn decides nothing.
      if (this.s.o.mayAct?.() !== false) {
        this.watchdog.tick();
        if (this.s.o.replicaPass === "every") reconcileEveryModel(this.s);
        else reconcileReplicas(this.s);
      }
      this.tickCancel = this.s.o.clock.setTimer(this.core.getPolicy().tickIntervalMs, loop);
    };
    this.tickCancel = this.s.o.clock.setTimer(this.core.getPolicy().tickIntervalMs, loop);
  }

  /** One replica reconciler pass (min floor, scale-down; replica-tick.ts). Runs on every tick of `startTicking`. */
  reconcileReplicas(): void {
    reconcileReplicas(this.s);
  }

  /** What the last replica reconciler pass looked at (models decided for, model timers running): a count, for tests. */
  replicaPassWork(): ReplicaPassWork {
    return this.s.replicaWork.lastWork();
  }

  // ------------------------------------------------------------------ loads

  /** Returns the model's ready instance, loading it if needed (load-path.ts); `actor`, who asked, is stamped on the load's events. */
  ensureLoaded(modelId: string, signal: AbortSignal, nodeId?: string, actor?: string): Promise<HeldInstance<H>> {
    return ensureLoaded(this.s, modelId, signal, nodeId, true, actor);
  }

  // ---------------------------------------------------------------- routing

  /** Routes one call: a lease on a ready instance, counted by the watchdog (routing.ts); `hint` may prefer a replica. */
  acquire(modelId: string, signal: AbortSignal, hint?: RouteHint): Promise<Lease<H>> {
    return acquire(this.s, modelId, signal, hint);
  }

  /**
   * The same lease in this turn when nothing needs waiting for (a routable
   * replica ready, its lock free); undefined when the call must take
   * `acquire`, which waits, loads or refuses (routing.ts acquireNow).
   */
  acquireNow(modelId: string, signal: { readonly aborted: boolean }, hint?: RouteHint): Lease<H> | undefined {
    return acquireNow(this.s, modelId, signal, hint);
  }

  /** A routed call saw UNAVAILABLE: the process is gone; remove it the normal way (routing.ts). */
  reportUnavailable(incarnation: string): Promise<void> {
    return reportUnavailable(this.s, incarnation);
  }

  // ------------------------------------------------------------- unloading

  /** Unloads a model and returns the real outcome (unload.ts). */
  unload(modelId: string, options: UnloadOptions): Promise<UnloadOutcome> {
    return unload(this.s, modelId, options);
  }

  /** Stops one instance by incarnation through the watchdog (unload.ts). */
  stopInstance(incarnation: string, options: UnloadOptions): Promise<UnloadOutcome> {
    return stopInstance(this.s, incarnation, options);
  }

  /** Drains a node: replicas keeping a model at min are moved one at a time, the rest stopped (drain-node.ts). */
  drainNode(nodeId: string, options: DrainOptions): Promise<void> {
    return drainNode(this.s, this.s.drains, nodeId, options);
  }

  // -------------------------------------------------------------- adoption

  /** Adopts an instance found only in a node's inventory as remote-only (adoption.ts). */
  adoptRemoteOnly(spec: ModelSpec, nodeId: string, address: string, incarnation: string, foundBy: AdoptionSource = "inventory", startedWith = ""): boolean {
    return adoptRemoteOnly(this.s, spec, nodeId, address, incarnation, foundBy, startedWith);
  }

  /** Adopts an instance as a leftover: accounted, never routed, stop retried (adoption.ts). */
  adoptLeftover(init: { readonly incarnation: string; readonly nodeId: string; readonly model: string; readonly address: string; readonly lastError: string; readonly foundBy: AdoptionSource }): boolean {
    return adoptLeftover(this.s, init);
  }

  /** At start: every open stop intent of the journal becomes a leftover at once (adoption.ts). */
  restoreStopIntents(intents: readonly { readonly incarnation: string; readonly nodeId: string; readonly model: string; readonly address: string }[]): number {
    return restoreStopIntents(this.s, intents);
  }

  /** Retries the stops of a node's leftovers now (its agent just became reachable). */
  retryLeftoversNow(nodeId: string): void {
    this.s.leftovers.retryNodeNow(nodeId);
  }

  // ------------------------------------------------------------------ exits

  /** The agent reported the process gone: remove it through the watchdog (instance-exits.ts). */
  onBackendGone(incarnation: string, info: { exitCode: number | undefined; signal: string; intentional: boolean; lastStderrLine: string }): void {
    onBackendGone(this.s, incarnation, info);
  }

  /** A node was declared lost: its instances become leftovers there (instance-exits.ts). */
  onNodeLost(nodeId: string): void {
    onNodeLost(this.s, nodeId);
    // The journal's entries there stop counting, as its held instances stop being routable.
    this.journalReplicas.nodeLost(nodeId);
  }

  /** An operator's audited word: forget an instance; never stops anything (instance-exits.ts). */
  forget(incarnation: string, operator: string, note: string): boolean {
    return forget(this.s, incarnation, operator, note) || forgetUnconfirmed(this.s, incarnation, operator, note);
  }

  // -------------------------------------------------------------- lifecycle

  /** A consistent view for ListModels. */
  snapshot(): { instances: (InstanceView & { placement: string; backend: string })[]; leftovers: Leftover[] } {
    const s = this.core.snapshot();
    return {
      instances: s.instances.map((v) => ({ ...v, placement: this.s.held.get(v.incarnation)?.placement ?? "remote-only", backend: this.s.models.get(v.model)?.backend ?? "" })),
      leftovers: this.s.leftovers.list(),
    };
  }

  /**
   * Stops timers; does not stop backends (the caller decides, DESIGN §2).
   * Loads in flight end UNAVAILABLE — the call waiting on one may succeed on
   * the next leader or after a restart, so it is a retry, never a CANCELLED
   * the caller did not ask for.
   */
  close(): void {
    this.s.closed = true;
    this.tickCancel?.();
    this.s.leftovers.close();
    this.s.freedRetries.close();
    for (const ctl of this.s.loadControllers.values()) ctl.abort(new WardenError(Code.Unavailable, "coordinator shutting down or stepping down: retry (another coordinator may lead)"));
  }
}
