import { Code, WardenError } from "@warden/common";
import type { Clock } from "@warden/common";
import { admit } from "./admission.js";
import { defaultCaps, type WatchdogCaps } from "./caps.js";
import { setModelRules, setPolicy } from "./core-policy.js";
import type { LoaderQuery } from "./core-state.js";
import type {
  AdmissionDecision,
  EnforcementDecision,
  ExplicitSelection,
  Occupancy,
  RemoveResult,
  SettleResult,
  TickDecision,
} from "./decision.js";
import { enforceGroups, enforceLimit } from "./enforcement.js";
import { selectExplicit, selectModel, selectNode, type ExplicitStopOptions } from "./explicit-selection.js";
import type { ModelRule } from "./model-rules.js";
import type { AdmissionRequest, InstanceSpec, InstanceStateName, InstanceView, OccupancyEntry } from "./instance.js";
import { markReady, registerLoading, releaseReservation, remove } from "./instance-lifecycle.js";
import { viewInstance } from "./instance-view.js";
import type { MemoryReading, PressureChange } from "./memory-pressure.js";
import { forgetNode, reportMemory, setNodeOccupancy } from "./node-inputs.js";
import { nodeOccupancy } from "./occupancy.js";
import { applyPolicyPatch, copyPolicy, defaultPolicy, type PolicyPatch, type WatchdogPolicy } from "./policy.js";
import { RequestTracker, type AddressRequestView, type Completion } from "./request-tracker.js";
import { settle } from "./settle.js";
import type { StopOutcome } from "./stop-command.js";
import { idleSinceMs, takeChangedModels } from "./replica-feed.js";
import { tick, tickFullScan } from "./tick.js";
import { TickSchedule, type TickWork } from "./tick-schedule.js";
import { WatchdogQueries } from "./watchdog-queries.js";

export type { LoaderQuery } from "./core-state.js";
export type { ExplicitStopOptions } from "./explicit-selection.js";
export type { EvictionAsk, NodePlacementSummary } from "./occupancy.js";

export interface WatchdogCoreOptions {
  /** Only `now()` is used: the core never schedules. */
  readonly clock: Pick<Clock, "now">;
  readonly loader: LoaderQuery;
  /** Applied over DESIGN §5 defaults, validated. */
  readonly policy?: PolicyPatch;
  readonly caps?: Partial<WatchdogCaps>;
}

/**
 * Creates the watchdog's synchronous decision core (DESIGN §3.1). See
 * {@link WatchdogCore}.
 */
export function createWatchdogCore(options: WatchdogCoreOptions): WatchdogCore {
  return new WatchdogCore(options);
}

/**
 * The pure watchdog: a synchronous state machine over identities (per
 * incarnation) and request state (per address). Selections detach victims
 * and return stop commands; `settle` applies the settle table. No I/O, no
 * timers, no logging: every effect is a returned value.
 *
 * Every mutation runs to completion in one call, so callers on one event loop
 * see each step atomically.
 *
 * The class is the API and the owner of all state (`st`); each rule lives in
 * the module named after it (admission, enforcement, tick, settle,
 * explicit-selection, instance-lifecycle, node-inputs, occupancy), which
 * takes that state explicitly. Request begin/end goes straight to the
 * request tracker. The read-only queries live in the base class
 * (watchdog-queries.ts), over the same state.
 */
export class WatchdogCore extends WatchdogQueries {
  readonly caps: WatchdogCaps;
  /** The same tracker as `st.requests`, held directly for the O(1) request paths. */
  private readonly requests: RequestTracker;

  constructor(options: WatchdogCoreOptions) {
    const clock = options.clock;
    const caps = Object.freeze({ ...defaultCaps, ...options.caps });
    const policy = applyPolicyPatch(defaultPolicy, options.policy ?? {}, caps);
    const requests = new RequestTracker(() => clock.now(), caps.maxAddresses, caps.maxOpenRequestsPerAddress);
    super({
      clock,
      loader: options.loader,
      caps,
      policy,
      pinned: new Set(policy.pinnedModels),
      modelRules: new Map(),
      requests,
      schedule: new TickSchedule(),
      changedModels: undefined,
      records: new Map(),
      atAddress: new Map(),
      byModel: new Map(),
      modelVersions: new Map(),
      modelChanges: 0,
      nodes: new Map(),
      loaded: 0,
      nextSeq: 0,
      nextNodeSeq: 0,
      memoryWatch: new Set(),
      evictionsHeld: new Set(),
      conflicts: undefined,
    });
    this.caps = caps;
    this.requests = requests;
  }

  // ---------------------------------------------------------------- policy

  /** A deep copy of the current policy. */
  getPolicy(): WatchdogPolicy {
    return copyPolicy(this.st.policy);
  }

  /**
   * Validates and applies a policy change live. Throws INVALID_ARGUMENT naming
   * the field; nothing changes on error. Accounting is untouched.
   */
  updatePolicy(patch: PolicyPatch): WatchdogPolicy {
    setPolicy(this.st, patch);
    return this.getPolicy();
  }

  /**
   * Replaces the per-model idle rules (replica floor, idle timeout; model-rules.ts)
   * as a whole, live. Throws INVALID_ARGUMENT naming the field; nothing changes on error.
   */
  setModelRules(rules: ReadonlyMap<string, ModelRule>): void {
    setModelRules(this.st, rules);
  }

  /** Groups of a model (a copy), or undefined when it has none. */
  modelGroups(model: string): string[] | undefined {
    const g = this.st.policy.modelGroups[model];
    return g === undefined ? undefined : [...g];
  }

  isPinned(model: string): boolean {
    return this.st.pinned.has(model);
  }

  // ---------------------------------------------------------------- requests

  /**
   * Begins a request on `address` and returns its idempotent completion.
   * O(1). The address need not be registered (calls already routed to an
   * instance that is being stopped keep counting, DESIGN §3.2 step 2).
   * Throws RESOURCE_EXHAUSTED past the caps.
   */
  trackRequest(address: string): Completion {
    return this.requests.track(address);
  }

  /** Legacy begin (LocalAI `Mark`); returns the request id. */
  mark(address: string): number {
    return this.requests.mark(address);
  }

  /** Legacy end (LocalAI `UnMark`): finishes the latest legacy request; no-op when none. */
  unmark(address: string): void {
    this.requests.unmark(address);
  }

  /** Sets last-used to now (cache hit). */
  updateLastUsed(address: string): void {
    this.requests.touch(address);
  }

  /** Requests in flight on `address` (the loader's graceful busy wait reads this). */
  inFlight(address: string): number {
    return this.requests.inFlight(address);
  }

  /** Last use of `address` (O(1), no copy: the replica routing's hot path). */
  lastUsedMs(address: string): number | undefined {
    return this.requests.lastUsedMs(address);
  }

  /** Request state of one address. */
  requestState(address: string): AddressRequestView | undefined {
    return this.requests.view(address);
  }

  // ---------------------------------------------------------------- identity (instance-lifecycle.ts, node-inputs.ts)

  /**
   * Registers a spawned process as `loading` (DESIGN §3.4 item 2: as soon as
   * the agent reports `spawned{address}`). Attaches the address to the
   * incarnation's reservation when there is one. Idempotent for the same
   * incarnation and address. Throws FAILED_PRECONDITION when another live
   * incarnation is registered at the address (the loader must `remove` it
   * first: its process is gone if the port was reused) or when the
   * incarnation is in another state.
   */
  registerLoading(spec: InstanceSpec): InstanceView {
    return registerLoading(this.st, spec);
  }

  /**
   * Marks a loading instance ready. Seeds last-used and idle-since at the
   * ready time when the address has no request state, so an instance nobody
   * calls still ages out (LocalAI never idles it) and a fresh instance is not
   * the first LRU victim (LocalAI W3). On a pending instance detached while
   * loading, it records that a row-3 settle must register it as ready (the
   * load went on, DESIGN §3.4 item 2). Returns the state after the call, or
   * `unknown` (F17: a late ready for an incarnation given up on — stop it).
   */
  markReady(incarnation: string): InstanceStateName | "pending" | "unknown" {
    return markReady(this.st, incarnation);
  }

  /** Registers an adopted instance straight as ready (remote-only after a restart). */
  registerReady(spec: InstanceSpec): InstanceView {
    registerLoading(this.st, spec);
    markReady(this.st, spec.incarnation);
    const rec = this.st.records.get(spec.incarnation);
    if (rec === undefined) throw new WardenError(Code.Internal, "registered instance vanished");
    return viewInstance(this.st, rec);
  }

  /**
   * Removes an instance through the watchdog (failed load, process exit,
   * forget): no phantom is left (DESIGN §3.4 item 5). The address's request
   * state is cleared when no other incarnation uses it; the ids still open
   * are returned. A pending instance is only marked exited: its settle clears
   * it (as row 2, since the process is gone).
   */
  remove(incarnation: string): RemoveResult {
    return remove(this.st, incarnation);
  }

  /** Releases a reservation whose start failed or was abandoned. False when it is not reserved. */
  releaseReservation(incarnation: string): boolean {
    return releaseReservation(this.st, incarnation);
  }

  /** Replaces the node's leftovers and orphans (from the reconciler / inventories). */
  setNodeOccupancy(nodeId: string, entries: readonly OccupancyEntry[]): void {
    setNodeOccupancy(this.st, nodeId, entries);
  }

  /** Records a memory reading for a node (heartbeat). Returns pressure transitions. */
  reportMemory(nodeId: string, reading: MemoryReading): PressureChange[] {
    return reportMemory(this.st, nodeId, reading);
  }

  /**
   * Holds (or resumes) the periodic evictions — idle, busy, memory — on a
   * node whose agent is unreachable: its instances serve on, and a stop
   * could not reach them. Explicit stops (an operator's) are not held.
   */
  holdEvictions(nodeId: string, held: boolean): void {
    if (held) this.st.evictionsHeld.add(nodeId);
    else this.st.evictionsHeld.delete(nodeId);
  }

  /** Forgets a node's occupancy and memory input (node gone for good). Instances must be removed separately. */
  forgetNode(nodeId: string): void {
    forgetNode(this.st, nodeId);
  }

  // ---------------------------------------------------------------- selection (enforcement.ts, admission.ts, explicit-selection.ts, tick.ts)

  /** Occupancy of a node (DESIGN §3.4 item 3). */
  occupancy(nodeId: string): Occupancy {
    return nodeOccupancy(this.st, nodeId);
  }

  /**
   * Group exclusivity on a node for `model` (localai-semantics §3.1, per
   * node). Every conflict must go: ready ones are selected (skipping pinned,
   * and busy unless force); anything else in a conflicting group — pinned,
   * busy, loading, reserved, freed, pending, leftover, orphan — sets need-more.
   */
  enforceGroups(nodeId: string, model: string, trigger: string | undefined = model): EnforcementDecision & { readonly conflicts: number } {
    return enforceGroups(this.st, nodeId, model, trigger);
  }

  /**
   * The per-node limit (localai-semantics §3.2 with DESIGN §3.4 item 3):
   * `toEvict = occupied + 1 − limit − pendingEviction`. Need-more when a
   * shortfall has any cause but pins, or when evictions are pending. A
   * pins-alone shortfall does not set it (`pinsOnly`).
   */
  enforceLimit(nodeId: string, trigger?: string): EnforcementDecision & { readonly fits: boolean; readonly pinsOnly: boolean; readonly occupancy: Occupancy } {
    return enforceLimit(this.st, nodeId, trigger);
  }

  /**
   * One atomic admission step on a node (DESIGN §3.4 item 3): groups first,
   * then the limit; the admitted load is reserved under its incarnation in the
   * same step. Idempotent for an incarnation already reserved on that node.
   */
  admit(request: AdmissionRequest): AdmissionDecision {
    return admit(this.st, request);
  }

  /**
   * Explicit paths (admin unload, drain, config removal, health failure,
   * reconciler retry): the named instance in any state — pinned, busy,
   * loading or freed. A pending one joins the stop already in flight.
   */
  selectExplicit(incarnation: string, options: ExplicitStopOptions): ExplicitSelection {
    return selectExplicit(this.st, incarnation, options);
  }

  /** Explicit selection of every instance on a node (drain). */
  selectNode(nodeId: string, options: ExplicitStopOptions): { readonly incarnation: string; readonly selection: ExplicitSelection }[] {
    return selectNode(this.st, nodeId, options);
  }

  /** Explicit selection of every instance of a model (config removal). */
  selectModel(model: string, options: ExplicitStopOptions): { readonly incarnation: string; readonly selection: ExplicitSelection }[] {
    return selectModel(this.st, model, options);
  }

  /**
   * One watchdog tick, checks in LocalAI's order busy → idle → memory. Pending
   * addresses are skipped; loading and freed instances are never selected.
   * Never waits: the returned stops are the caller's to send.
   */
  tick(): TickDecision {
    return tick(this.st);
  }

  /**
   * The same tick judging every address, not only the due ones: the
   * reference the due-only tick is checked against (tests, bench).
   */
  tickFullScan(): TickDecision {
    return tickFullScan(this.st);
  }

  /**
   * The models whose instances changed since the last call — a transition of
   * one, or the first call starting or the last ending at one's address — so
   * the replica reconciler looks only at those. The first call only starts
   * collecting (its caller looks at every model once). O(changes).
   */
  takeChangedModels(): string[] {
    return takeChangedModels(this.st);
  }

  /**
   * For a ready instance with no call in flight: since when it is idle (its
   * address's idle-since, else its ready time); undefined otherwise. O(1), no
   * copy: the replica reconciler reads it per replica.
   */
  idleSinceMs(incarnation: string): number | undefined {
    return idleSinceMs(this.st, incarnation);
  }

  /** What the last tick looked at (addresses re-timed, judged, with a timer running): a count, for tests and metrics. */
  lastTickWork(): TickWork {
    return this.st.schedule.lastWork();
  }

  // ---------------------------------------------------------------- settle (settle.ts)

  /**
   * Applies a stop outcome atomically (DESIGN §3.2 step 4). For a failed stop
   * it asks `hasModelAtAddress` synchronously, in this same call. A settle for
   * an incarnation with no stop in flight is a no-op (`not-pending`).
   */
  settle(incarnation: string, outcome: StopOutcome): SettleResult {
    return settle(this.st, incarnation, outcome);
  }
}
