import type { WatchdogCore, WatchdogPolicy, WatchdogService } from "@warden/watchdog";
import { createWatchdogCore, createWatchdogService } from "@warden/watchdog";
import { isBeingStopped, knows } from "./adoption.js";
import { GoneIncarnations } from "./gone-incarnations.js";
import type { Leftover } from "./leftover-tracker.js";
import { LoadCooldown } from "./load-cooldown.js";
import type { LoadJob } from "./load-jobs.js";
import type { LoaderOptions } from "./loader-options.js";
import { assembleLoaderState, modelPolicy } from "./loader-assembly.js";
import type { LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { modelRules } from "./replica-tick.js";
import { JournalReplicas } from "./journal-replicas.js";
import { onSettled, stopSequence } from "./stop-sequence.js";

/**
 * The base of {@link Loader}: builds the loader's state from its options (the
 * watchdog core and service over it) and answers every read-only query over
 * that state, so the Loader's own file keeps the operations. It owns nothing
 * the Loader does not see: the state is `s`, protected.
 */
export abstract class LoaderQueries<H extends BackendHandle = BackendHandle> {
  readonly core: WatchdogCore;
  readonly watchdog: WatchdogService;
  /** Replicas a restarted coordinator knows only from its journal (journal-replicas.ts). */
  readonly journalReplicas: JournalReplicas<H>;
  protected readonly s: LoaderState<H>;

  constructor(o: LoaderOptions<H>) {
    const held = new Map<string, HeldInstance<H>>();
    const models = new Map<string, ModelSpec>();
    const cooldown = new LoadCooldown(o.cooldown);
    const gone = new GoneIncarnations(o.maxGoneIncarnations);
    for (const m of o.models) models.set(m.id, m);
    this.core = createWatchdogCore({
      clock: o.clock,
      loader: { hasModelAtAddress: (model, address, incarnation) => this.hasModelAtAddress(model, address, incarnation) },
      policy: { ...modelPolicy(models), ...o.policy },
      ...(o.caps === undefined ? {} : { caps: o.caps }),
    });
    this.core.setModelRules(modelRules(models));
    this.watchdog = createWatchdogService({
      core: this.core,
      stopPort: { stop: (c) => stopSequence(this.s, c) },
      onSettled: (r) => {
        onSettled(this.s, r);
      },
    });
    this.s = assembleLoaderState(o, this.core, this.watchdog, held, models, cooldown, gone);
    this.journalReplicas = new JournalReplicas(this.s);
    // The recovery window is over: a lowered max may act on the replicas now settled (replica-reconciler.ts).
    const opened = (): void => {
      this.s.admissionOpen = true;
      for (const m of this.s.models.keys()) this.s.replicaWork.mark(m);
    };
    if (o.admissionGate !== undefined) void o.admissionGate.then(opened, opened);
  }

  // ---------------------------------------------------------------- queries

  /** DESIGN §3.2: true while the loader holds this model at this address and incarnation (a load in progress counts). */
  hasModelAtAddress(model: string, address: string, incarnation: string): boolean {
    const h = this.s.held.get(incarnation);
    return h !== undefined && h.model === model && h.address === address;
  }

  /** The configured models. */
  modelSpecs(): ModelSpec[] {
    return [...this.s.models.values()];
  }

  modelSpec(id: string): ModelSpec | undefined {
    return this.s.models.get(id);
  }

  heldInstance(incarnation: string): HeldInstance<H> | undefined {
    return this.s.held.get(incarnation);
  }

  heldInstances(): HeldInstance<H>[] {
    return [...this.s.held.values()];
  }

  leftoverList(): Leftover[] {
    return this.s.leftovers.list();
  }

  /** The instances held on one node, oldest first: O(instances there), for its heartbeat. */
  heldOn(nodeId: string): HeldInstance<H>[] {
    return this.s.heldByNode.on(nodeId);
  }

  /** Which instances the loader holds on the node (HeldNodeIndex.stamp): equal stamps, the same instances. O(1). */
  heldStamp(nodeId: string): number {
    return this.s.heldByNode.stamp(nodeId);
  }

  /**
   * The node's answer to `bundleStale` may have changed (its agent reported
   * another backend bundle for an instance or its catalog): the next replica
   * pass looks again at the models held there. O(instances there).
   */
  bundlesChanged(nodeId: string): void {
    for (const h of this.s.heldByNode.on(nodeId)) this.s.replicaWork.mark(h.model);
  }

  /** The leftovers on one node: O(leftovers there). */
  leftoversOn(nodeId: string): Leftover[] {
    return this.s.leftovers.onNode(nodeId);
  }

  /**
   * The client routing uses for a ready held instance (made now if no call
   * made it yet), for the coordinator's own health probe while the node's
   * agent is unreachable; undefined when the instance is not held ready.
   */
  routingBackend(incarnation: string): H | undefined {
    const h = this.s.held.get(incarnation);
    if (h?.phase !== "ready" || h.address === undefined) return undefined;
    h.backend ??= this.s.o.backends.connect(h.address, { nodeId: h.nodeId, model: h.model });
    return h.backend;
  }

  /** Loads in progress (leaders only). */
  get loadingCount(): number {
    return this.s.loads.size;
  }

  /** The model's load job now (waiting, loading, failed), if any (load-jobs.ts). */
  loadJob(model: string): LoadJob | undefined {
    return this.s.jobs.of(model, this.s.o.clock.now());
  }

  /** Load jobs by state now (waiting, loading, failed). */
  loadJobCounts(): Record<LoadJob["t"], number> {
    return this.s.jobs.counts(this.s.o.clock.now());
  }

  getPolicy(): WatchdogPolicy {
    return this.core.getPolicy();
  }

  /** True when a routed call's failure is explained by a stop of its instance (adoption.ts). */
  isBeingStopped(incarnation: string): boolean {
    return isBeingStopped(this.s, incarnation);
  }

  /** True when this incarnation is known gone for good (never adopted, listed or stopped again). */
  isGone(incarnation: string): boolean {
    return this.s.gone.has(incarnation);
  }

  /**
   * The node holding this incarnation (a held instance, a watchdog instance or
   * a leftover); undefined when none does. A node reporting an incarnation
   * held on another node is refused (NodeTable).
   */
  nodeOf(incarnation: string): string | undefined {
    return this.s.held.get(incarnation)?.nodeId ?? this.s.leftovers.get(incarnation)?.nodeId ?? this.core.instance(incarnation)?.nodeId;
  }

  /** True when the loader tracks this incarnation in any form. */
  knows(incarnation: string): boolean {
    return knows(this.s, incarnation);
  }

  /** True while a StopBackend for this incarnation is in flight (even one sent before an operator forgot it). */
  stopInFlight(incarnation: string): boolean {
    return this.s.stopRpcs.has(incarnation);
  }
}
