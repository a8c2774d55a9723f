import { Code, WardenError, invalidArgument } from "@warden/common";
import type { Clock } from "@warden/common";
import { defaultCaps, type WatchdogCaps } from "./caps.js";
import type {
  AdmissionDecision,
  EnforcementDecision,
  ExplicitSelection,
  LimitExceeded,
  Occupancy,
  RemoveResult,
  SettleResult,
  Shortfall,
  TickDecision,
} from "./decision.js";
import type { AdmissionRequest, InstanceSpec, InstanceStateName, InstanceView, OccupancyEntry } from "./instance.js";
import { NodeMemory, type MemoryDevice, type MemoryReading, type PressureChange } from "./memory-pressure.js";
import { applyPolicyPatch, copyPolicy, defaultPolicy, type PolicyPatch, type WatchdogPolicy } from "./policy.js";
import { RequestTracker, type AddressRequestView, type Completion } from "./request-tracker.js";
import type { DetachedState, EvictionReason, StopCommand, StopOutcome } from "./stop-command.js";
import { compareVictims } from "./victim-order.js";
import { describeValue } from "./describe-value.js";
import type { NodeView, WatchdogSnapshot } from "./watchdog-snapshot.js";

/** The one question the core asks the loader, synchronously, inside `settle`. */
export interface LoaderQuery {
  /**
   * True while the loader holds `model` at `address` under `incarnation`; a
   * load in progress there counts (LocalAI W4). Must not call back into the
   * watchdog.
   */
  hasModelAtAddress(model: string, address: string, incarnation: string): boolean;
}

export interface WatchdogCoreOptions {
  /** Only `now()` is used: the core never schedules. */
  readonly clock: Pick<Clock, "now">;
  readonly loader: LoaderQuery;
  /** Applied over DESIGN §5 defaults, validated. */
  readonly policy?: PolicyPatch;
  readonly caps?: Partial<WatchdogCaps>;
}

/** Options of an explicit stop. */
export interface ExplicitStopOptions {
  readonly reason: Extract<EvictionReason, "admin" | "drain" | "config" | "health" | "retry">;
  /** Skip the busy wait and `Free()`. @default false */
  readonly force?: boolean;
}

type RecState =
  | { readonly t: "reserved"; readonly sinceMs: number }
  | { readonly t: "loading"; readonly sinceMs: number }
  | { readonly t: "ready"; readonly sinceMs: number }
  | { readonly t: "freed"; readonly sinceMs: number }
  | { readonly t: "pending"; readonly sinceMs: number; from: DetachedState; readonly command: StopCommand; exited: boolean };

interface InstanceRecord {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  readonly seq: number;
  address: string | undefined;
  sizeBytes: number;
  gpu: number | undefined;
  state: RecState;
  /** The address this record is indexed under (kept by `setState` only). */
  indexedAddress: string | undefined;
}

/** Per-node figures for placement (see `placementSummary`). */
export interface NodePlacementSummary {
  readonly occupied: number;
  readonly accountedBytes: number;
  readonly evictableBytes: number;
  readonly evictableSlots: number;
  readonly evictableConflicts: readonly string[];
  readonly blockingConflicts: readonly string[];
}

const noStrings: readonly string[] = Object.freeze([]);
const emptyPlacementSummary: NodePlacementSummary = Object.freeze({ occupied: 0, accountedBytes: 0, evictableBytes: 0, evictableSlots: 0, evictableConflicts: noStrings, blockingConflicts: noStrings });

interface NodeRecord {
  readonly nodeId: string;
  readonly instances: Set<InstanceRecord>;
  occupancy: readonly OccupancyEntry[];
  memory: NodeMemory | undefined;
}

function hasControlChars(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** Whether `other` (another model) is in one of `groups`; a module function, not a per-call closure, on placement's hot path. */
function sharesGroup(model: string, groups: readonly string[], other: string | undefined, otherGroups: Iterable<string>): boolean {
  if (other === model) return false;
  for (const g of otherGroups) if (groups.includes(g)) return true;
  return false;
}

function isRegistered(t: RecState["t"]): t is DetachedState {
  return t === "loading" || t === "ready" || t === "freed";
}

const emptyShortfall: Shortfall = Object.freeze({
  missing: 0,
  pinned: 0,
  busy: 0,
  loading: 0,
  reserved: 0,
  freed: 0,
  pending: 0,
  leftovers: 0,
  orphans: 0,
});

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
 */
export class WatchdogCore {
  private readonly clock: Pick<Clock, "now">;
  private readonly loader: LoaderQuery;
  readonly caps: WatchdogCaps;
  private policyValue: WatchdogPolicy;
  private pinned: ReadonlySet<string>;
  private readonly requests: RequestTracker;
  private readonly records = new Map<string, InstanceRecord>();
  private readonly atAddress = new Map<string, Set<InstanceRecord>>();
  private readonly byModel = new Map<string, Set<InstanceRecord>>();
  private readonly nodes = new Map<string, NodeRecord>();
  private loaded = 0;
  private nextSeq = 0;

  constructor(options: WatchdogCoreOptions) {
    this.clock = options.clock;
    this.loader = options.loader;
    this.caps = Object.freeze({ ...defaultCaps, ...options.caps });
    this.policyValue = applyPolicyPatch(defaultPolicy, options.policy ?? {}, this.caps);
    this.pinned = new Set(this.policyValue.pinnedModels);
    this.requests = new RequestTracker(() => this.clock.now(), this.caps.maxAddresses, this.caps.maxOpenRequestsPerAddress);
  }

  // ---------------------------------------------------------------- policy

  /** A deep copy of the current policy. */
  getPolicy(): WatchdogPolicy {
    return copyPolicy(this.policyValue);
  }

  /**
   * Validates and applies a policy change live. Throws INVALID_ARGUMENT naming
   * the field; nothing changes on error. Accounting is untouched.
   */
  updatePolicy(patch: PolicyPatch): WatchdogPolicy {
    this.policyValue = applyPolicyPatch(this.policyValue, patch, this.caps);
    this.pinned = new Set(this.policyValue.pinnedModels);
    return this.getPolicy();
  }

  /** Groups of a model (a copy), or undefined when it has none. */
  modelGroups(model: string): string[] | undefined {
    const g = this.policyValue.modelGroups[model];
    return g === undefined ? undefined : [...g];
  }

  isPinned(model: string): boolean {
    return this.pinned.has(model);
  }

  private groupsOf(model: string): readonly string[] {
    return this.policyValue.modelGroups[model] ?? [];
  }

  /** Writes a model's config (groups, pin) as the loader knows it into the policy tables. */
  private applyModelConfig(model: string, groups: readonly string[] | undefined, pinned: boolean | undefined): void {
    const patch: { -readonly [K in keyof PolicyPatch]: PolicyPatch[K] } = {};
    if (groups !== undefined) {
      const same = JSON.stringify(this.policyValue.modelGroups[model] ?? []) === JSON.stringify(groups);
      if (!same) patch.modelGroups = { ...this.policyValue.modelGroups, [model]: groups };
    }
    if (pinned !== undefined && pinned !== this.pinned.has(model)) {
      patch.pinnedModels = pinned ? [...this.policyValue.pinnedModels, model] : this.policyValue.pinnedModels.filter((m) => m !== model);
    }
    if (Object.keys(patch).length > 0) this.updatePolicy(patch);
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

  /** Request state of one address. */
  requestState(address: string): AddressRequestView | undefined {
    return this.requests.view(address);
  }

  // ---------------------------------------------------------------- identity

  private checkName(field: string, v: unknown): string {
    if (typeof v !== "string" || v.length === 0 || v.length > this.caps.maxNameLength || hasControlChars(v)) {
      throw invalidArgument(field, `must be 1..${this.caps.maxNameLength} printable characters`);
    }
    return v;
  }

  private checkSize(v: unknown): number {
    if (v === undefined) return 0;
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw invalidArgument("sizeBytes", `must be a finite number >= 0, got ${describeValue(v)}`);
    return v;
  }

  private checkGpu(v: unknown): number | undefined {
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw invalidArgument("gpu", `must be an integer >= 0, got ${describeValue(v)}`);
    return v;
  }

  private nodeFor(nodeId: string): NodeRecord {
    let n = this.nodes.get(nodeId);
    if (n === undefined) {
      if (this.nodes.size >= this.caps.maxNodes) throw new WardenError(Code.ResourceExhausted, `at most ${this.caps.maxNodes} nodes`, { details: { nodeId } });
      n = { nodeId, instances: new Set(), occupancy: [], memory: undefined };
      this.nodes.set(nodeId, n);
    }
    return n;
  }

  private dropNodeIfEmpty(n: NodeRecord): void {
    if (n.instances.size === 0 && n.occupancy.length === 0 && n.memory === undefined) this.nodes.delete(n.nodeId);
  }

  private registeredAt(address: string): InstanceRecord | undefined {
    const set = this.atAddress.get(address);
    if (set === undefined) return undefined;
    for (const r of set) if (isRegistered(r.state.t)) return r;
    return undefined;
  }

  private addressPending(address: string): boolean {
    const set = this.atAddress.get(address);
    if (set === undefined) return false;
    for (const r of set) if (r.state.t === "pending") return true;
    return false;
  }

  /**
   * The one transition point. `next === undefined` forgets the record. Keeps
   * every index (address, model, node, loaded count) in step with the state.
   */
  private setState(rec: InstanceRecord, next: RecState | undefined): void {
    const known = this.records.get(rec.incarnation) === rec;
    if (known && isRegistered(rec.state.t)) this.loaded--;
    if (rec.indexedAddress !== undefined) {
      const set = this.atAddress.get(rec.indexedAddress);
      set?.delete(rec);
      if (set?.size === 0) this.atAddress.delete(rec.indexedAddress);
      rec.indexedAddress = undefined;
    }
    if (next === undefined) {
      if (!known) return;
      this.records.delete(rec.incarnation);
      const m = this.byModel.get(rec.model);
      m?.delete(rec);
      if (m?.size === 0) this.byModel.delete(rec.model);
      const n = this.nodes.get(rec.nodeId);
      if (n !== undefined) {
        n.instances.delete(rec);
        this.dropNodeIfEmpty(n);
      }
      return;
    }
    if (!known) {
      this.records.set(rec.incarnation, rec);
      let m = this.byModel.get(rec.model);
      if (m === undefined) {
        m = new Set();
        this.byModel.set(rec.model, m);
      }
      m.add(rec);
      this.nodeFor(rec.nodeId).instances.add(rec);
    }
    rec.state = next;
    if (isRegistered(next.t)) this.loaded++;
    if (rec.address !== undefined && next.t !== "reserved") {
      let set = this.atAddress.get(rec.address);
      if (set === undefined) {
        set = new Set();
        this.atAddress.set(rec.address, set);
      }
      set.add(rec);
      rec.indexedAddress = rec.address;
    }
  }

  private capacityCheck(): void {
    if (this.records.size >= this.caps.maxInstances) throw new WardenError(Code.ResourceExhausted, `at most ${this.caps.maxInstances} instances`);
  }

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
    const nodeId = this.checkName("nodeId", spec.nodeId);
    const model = this.checkName("model", spec.model);
    const incarnation = this.checkName("incarnation", spec.incarnation);
    const address = this.checkName("address", spec.address);
    const sizeBytes = this.checkSize(spec.sizeBytes);
    const gpu = this.checkGpu(spec.gpu);
    const other = this.registeredAt(address);
    if (other !== undefined && other.incarnation !== incarnation) {
      throw new WardenError(Code.FailedPrecondition, `address ${address} is registered to incarnation ${other.incarnation} (${other.model})`, {
        details: { address, incarnation: other.incarnation },
      });
    }
    const existing = this.records.get(incarnation);
    if (existing !== undefined) {
      if (existing.nodeId !== nodeId || existing.model !== model) {
        throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} belongs to ${existing.model} on ${existing.nodeId}`);
      }
      if (existing.state.t === "loading" && existing.address === address) return this.view(existing);
      if (existing.state.t !== "reserved") {
        throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} is ${existing.state.t}, not reserved`);
      }
      this.applyModelConfig(model, spec.groups, spec.pinned);
      existing.address = address;
      existing.gpu = gpu;
      if (spec.sizeBytes !== undefined) existing.sizeBytes = sizeBytes;
      this.setState(existing, { t: "loading", sinceMs: this.clock.now() });
      return this.view(existing);
    }
    this.capacityCheck();
    this.applyModelConfig(model, spec.groups, spec.pinned);
    const rec: InstanceRecord = {
      incarnation,
      nodeId,
      model,
      seq: this.nextSeq++,
      address,
      sizeBytes,
      gpu,
      state: { t: "loading", sinceMs: 0 },
      indexedAddress: undefined,
    };
    this.setState(rec, { t: "loading", sinceMs: this.clock.now() });
    return this.view(rec);
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
    const rec = this.records.get(incarnation);
    if (rec === undefined) return "unknown";
    const s = rec.state;
    switch (s.t) {
      case "loading":
        this.setState(rec, { t: "ready", sinceMs: this.clock.now() });
        if (rec.address !== undefined) this.requests.seedIdle(rec.address);
        return "ready";
      case "pending":
        if (s.from === "loading") s.from = "ready";
        if (rec.address !== undefined) this.requests.seedIdle(rec.address);
        return "pending";
      case "reserved":
        throw new WardenError(Code.FailedPrecondition, `incarnation ${incarnation} is reserved; register it as loading first`);
      case "ready":
      case "freed":
        return s.t;
    }
  }

  /** Registers an adopted instance straight as ready (remote-only after a restart). */
  registerReady(spec: InstanceSpec): InstanceView {
    this.registerLoading(spec);
    this.markReady(spec.incarnation);
    const rec = this.records.get(spec.incarnation);
    if (rec === undefined) throw new WardenError(Code.Internal, "registered instance vanished");
    return this.view(rec);
  }

  /**
   * Removes an instance through the watchdog (failed load, process exit,
   * forget): no phantom is left (DESIGN §3.4 item 5). The address's request
   * state is cleared when no other incarnation uses it; the ids still open
   * are returned. A pending instance is only marked exited: its settle clears
   * it (as row 2, since the process is gone).
   */
  remove(incarnation: string): RemoveResult {
    const rec = this.records.get(incarnation);
    if (rec === undefined) return { t: "unknown" };
    const s = rec.state;
    switch (s.t) {
      case "reserved": {
        const instance = this.view(rec);
        this.setState(rec, undefined);
        return { t: "released", instance };
      }
      case "pending":
        s.exited = true;
        return { t: "pending", instance: this.view(rec) };
      case "loading":
      case "ready":
      case "freed": {
        const instance = this.view(rec);
        this.setState(rec, undefined);
        const cleared = rec.address !== undefined && !this.atAddress.has(rec.address) ? this.requests.clear(rec.address) : [];
        return { t: "removed", instance, clearedRequestIds: cleared };
      }
    }
  }

  /** Releases a reservation whose start failed or was abandoned. False when it is not reserved. */
  releaseReservation(incarnation: string): boolean {
    const rec = this.records.get(incarnation);
    if (rec?.state.t !== "reserved") return false;
    this.setState(rec, undefined);
    return true;
  }

  /** Replaces the node's leftovers and orphans (from the reconciler / inventories). */
  setNodeOccupancy(nodeId: string, entries: readonly OccupancyEntry[]): void {
    this.checkName("nodeId", nodeId);
    if (entries.length > this.caps.maxOccupancyPerNode) throw invalidArgument("entries", `at most ${this.caps.maxOccupancyPerNode} per node`);
    const copy = entries.map((e, i) => {
      const kind: unknown = e.kind;
      if (kind !== "leftover" && kind !== "orphan") throw invalidArgument(`entries[${i}].kind`, "must be leftover or orphan");
      if (e.groups.length > this.caps.maxGroupsPerModel) throw invalidArgument(`entries[${i}].groups`, `at most ${this.caps.maxGroupsPerModel}`);
      return Object.freeze({ kind: e.kind, key: e.key, model: e.model, groups: Object.freeze([...e.groups]), sizeBytes: this.checkSize(e.sizeBytes) });
    });
    const n = copy.length === 0 ? this.nodes.get(nodeId) : this.nodeFor(nodeId);
    if (n === undefined) return;
    n.occupancy = copy;
    this.dropNodeIfEmpty(n);
  }

  /** Records a memory reading for a node (heartbeat). Returns pressure transitions. */
  reportMemory(nodeId: string, reading: MemoryReading): PressureChange[] {
    this.checkName("nodeId", nodeId);
    const n = this.nodeFor(nodeId);
    n.memory ??= new NodeMemory(nodeId);
    return n.memory.report(reading, this.clock.now(), this.policyValue, this.caps.maxDevicesPerNode);
  }

  /** Forgets a node's occupancy and memory input (node gone for good). Instances must be removed separately. */
  forgetNode(nodeId: string): void {
    const n = this.nodes.get(nodeId);
    if (n === undefined) return;
    n.occupancy = [];
    n.memory = undefined;
    this.dropNodeIfEmpty(n);
  }

  // ---------------------------------------------------------------- selection

  private detach(rec: InstanceRecord, reason: EvictionReason, force: boolean, trigger: string | undefined): StopCommand {
    const s = rec.state;
    if (!isRegistered(s.t) || rec.address === undefined) throw new WardenError(Code.Internal, `cannot detach ${rec.incarnation} in state ${s.t}`);
    const now = this.clock.now();
    const openRequestIds = this.requests.openIds(rec.address);
    const command: StopCommand = Object.freeze({
      nodeId: rec.nodeId,
      address: rec.address,
      incarnation: rec.incarnation,
      model: rec.model,
      force,
      reason,
      wasBusy: openRequestIds.length > 0,
      detachedFrom: s.t,
      openRequestIds: Object.freeze(openRequestIds),
      trigger,
      atMs: now,
    });
    // Identity only: request state stays live during the stop (DESIGN §3.2 step 2).
    this.setState(rec, { t: "pending", sinceMs: now, from: s.t, command, exited: false });
    return command;
  }

  private busy(rec: InstanceRecord): boolean {
    return rec.address !== undefined && this.requests.inFlight(rec.address) > 0;
  }

  private ordered(recs: InstanceRecord[]): InstanceRecord[] {
    const sizeAware = this.policyValue.sizeAware;
    const keyed = recs.map((r) => ({
      r,
      k: { lastUsedMs: r.address === undefined ? undefined : this.requests.lastUsedMs(r.address), sizeBytes: r.sizeBytes, seq: r.seq },
    }));
    keyed.sort((a, b) => compareVictims(a.k, b.k, sizeAware));
    return keyed.map((x) => x.r);
  }

  /** Occupancy of a node (DESIGN §3.4 item 3). */
  occupancy(nodeId: string): Occupancy {
    const n = this.nodes.get(nodeId);
    let reserved = 0,
      loading = 0,
      ready = 0,
      freed = 0,
      pendingEviction = 0,
      leftovers = 0,
      orphans = 0,
      accountedBytes = 0;
    if (n !== undefined) {
      for (const r of n.instances) {
        accountedBytes += r.sizeBytes;
        switch (r.state.t) {
          case "reserved":
            reserved++;
            break;
          case "loading":
            loading++;
            break;
          case "ready":
            ready++;
            break;
          case "freed":
            freed++;
            break;
          case "pending":
            pendingEviction++;
            break;
        }
      }
      for (const e of n.occupancy) {
        accountedBytes += e.sizeBytes;
        if (e.kind === "leftover") leftovers++;
        else orphans++;
      }
    }
    const total = reserved + loading + ready + freed + pendingEviction + leftovers + orphans;
    return { reserved, loading, ready, freed, pendingEviction, leftovers, orphans, total, accountedBytes };
  }

  /**
   * Group exclusivity on a node for `model` (localai-semantics §3.1, per
   * node). Every conflict must go: ready ones are selected (skipping pinned,
   * and busy unless force); anything else in a conflicting group — pinned,
   * busy, loading, reserved, freed, pending, leftover, orphan — sets need-more.
   */
  enforceGroups(nodeId: string, model: string, trigger: string | undefined = model): EnforcementDecision & { readonly conflicts: number } {
    const wanted = this.groupsOf(model);
    if (wanted.length === 0) return { stops: [], needMore: false, shortfall: emptyShortfall, conflicts: 0 };
    const n = this.nodes.get(nodeId);
    if (n === undefined) return { stops: [], needMore: false, shortfall: emptyShortfall, conflicts: 0 };
    const wantedSet = new Set(wanted);
    const shares = (groups: readonly string[]): boolean => groups.some((g) => wantedSet.has(g));
    const force = this.policyValue.forceEvictionWhenBusy;
    const sf = { ...emptyShortfall };
    let conflicts = 0;
    const candidates: InstanceRecord[] = [];
    for (const r of n.instances) {
      if (r.model === model || !shares(this.groupsOf(r.model))) continue;
      conflicts++;
      switch (r.state.t) {
        case "ready":
          if (this.pinned.has(r.model)) sf.pinned++;
          else if (!force && this.busy(r)) sf.busy++;
          else candidates.push(r);
          break;
        case "reserved":
          sf.reserved++;
          break;
        case "loading":
          sf.loading++;
          break;
        case "freed":
          sf.freed++;
          break;
        case "pending":
          sf.pending++;
          break;
      }
    }
    for (const e of n.occupancy) {
      if (e.model === model || !shares(e.groups)) continue;
      conflicts++;
      if (e.kind === "leftover") sf.leftovers++;
      else sf.orphans++;
    }
    const stops = this.ordered(candidates).map((r) => this.detach(r, "group", this.busy(r), trigger));
    sf.missing = conflicts - stops.length;
    return { stops, needMore: stops.length < conflicts, shortfall: sf, conflicts };
  }

  /**
   * The per-node limit (localai-semantics §3.2 with DESIGN §3.4 item 3):
   * `toEvict = occupied + 1 − limit − pendingEviction`. Need-more when a
   * shortfall has any cause but pins, or when evictions are pending. A
   * pins-alone shortfall does not set it (`pinsOnly`).
   */
  enforceLimit(nodeId: string, trigger?: string): EnforcementDecision & { readonly fits: boolean; readonly pinsOnly: boolean; readonly occupancy: Occupancy } {
    const occ = this.occupancy(nodeId);
    const limit = this.policyValue.limitPerNode;
    if (limit <= 0 || occ.total + 1 <= limit) return { stops: [], needMore: false, shortfall: emptyShortfall, fits: true, pinsOnly: false, occupancy: occ };
    const toEvict = occ.total + 1 - limit - occ.pendingEviction;
    const sf = {
      ...emptyShortfall,
      reserved: occ.reserved,
      loading: occ.loading,
      freed: occ.freed,
      pending: occ.pendingEviction,
      leftovers: occ.leftovers,
      orphans: occ.orphans,
    };
    const stops: StopCommand[] = [];
    if (toEvict > 0) {
      const n = this.nodes.get(nodeId);
      const ready = n === undefined ? [] : [...n.instances].filter((r) => r.state.t === "ready");
      const force = this.policyValue.forceEvictionWhenBusy;
      for (const r of this.ordered(ready)) {
        if (stops.length >= toEvict) break;
        if (this.pinned.has(r.model)) {
          sf.pinned++;
          continue;
        }
        const busy = this.busy(r);
        if (busy && !force) {
          sf.busy++;
          continue;
        }
        stops.push(this.detach(r, "lru", busy, trigger));
      }
    }
    const missing = Math.max(0, toEvict - stops.length);
    sf.missing = missing;
    const otherBlockers = sf.busy + sf.reserved + sf.loading + sf.freed + sf.leftovers + sf.orphans;
    const needMore = occ.pendingEviction > 0 || (missing > 0 && otherBlockers > 0);
    return { stops, needMore, shortfall: sf, fits: false, pinsOnly: missing > 0 && otherBlockers === 0, occupancy: occ };
  }

  /**
   * One atomic admission step on a node (DESIGN §3.4 item 3): groups first,
   * then the limit; the admitted load is reserved under its incarnation in the
   * same step. Idempotent for an incarnation already reserved on that node.
   */
  admit(request: AdmissionRequest): AdmissionDecision {
    const nodeId = this.checkName("nodeId", request.nodeId);
    const model = this.checkName("model", request.model);
    const incarnation = this.checkName("incarnation", request.incarnation);
    const sizeBytes = this.checkSize(request.sizeBytes);
    const existing = this.records.get(incarnation);
    if (existing !== undefined) {
      if (existing.state.t === "reserved" && existing.nodeId === nodeId && existing.model === model) {
        return { t: "admitted", occupancy: this.occupancy(nodeId), limitExceeded: undefined };
      }
      throw new WardenError(Code.AlreadyExists, `incarnation ${incarnation} is already ${existing.state.t}`, { details: { incarnation } });
    }
    this.capacityCheck();
    this.applyModelConfig(model, request.groups, request.pinned);
    const g = this.enforceGroups(nodeId, model, model);
    if (g.conflicts > 0) return { t: "wait", cause: "group", stops: g.stops, needMore: g.needMore, shortfall: g.shortfall };
    const l = this.enforceLimit(nodeId, model);
    let limitExceeded: LimitExceeded | undefined;
    if (!l.fits) {
      if (l.stops.length > 0 || l.needMore || !l.pinsOnly) return { t: "wait", cause: "limit", stops: l.stops, needMore: l.needMore, shortfall: l.shortfall };
      const n = this.nodes.get(nodeId);
      const pinnedIncarnations = n === undefined ? [] : [...n.instances].filter((r) => this.pinned.has(r.model)).map((r) => r.incarnation);
      limitExceeded = {
        type: "policy.limit-exceeded",
        nodeId,
        model,
        incarnation,
        limit: this.policyValue.limitPerNode,
        occupied: l.occupancy.total + 1,
        pinnedIncarnations,
      };
    }
    const rec: InstanceRecord = {
      incarnation,
      nodeId,
      model,
      seq: this.nextSeq++,
      address: undefined,
      sizeBytes,
      gpu: undefined,
      state: { t: "reserved", sinceMs: 0 },
      indexedAddress: undefined,
    };
    this.setState(rec, { t: "reserved", sinceMs: this.clock.now() });
    return { t: "admitted", occupancy: this.occupancy(nodeId), limitExceeded };
  }

  /**
   * Explicit paths (admin unload, drain, config removal, health failure,
   * reconciler retry): the named instance in any state — pinned, busy,
   * loading or freed. A pending one joins the stop already in flight.
   */
  selectExplicit(incarnation: string, options: ExplicitStopOptions): ExplicitSelection {
    const rec = this.records.get(incarnation);
    if (rec === undefined) return { t: "unknown" };
    const s = rec.state;
    switch (s.t) {
      case "reserved":
        return { t: "reserved" };
      case "pending":
        return { t: "joined", command: s.command };
      case "loading":
      case "ready":
      case "freed":
        return { t: "stop", command: this.detach(rec, options.reason, options.force ?? false, undefined) };
    }
  }

  /** Explicit selection of every instance on a node (drain). */
  selectNode(nodeId: string, options: ExplicitStopOptions): { readonly incarnation: string; readonly selection: ExplicitSelection }[] {
    const n = this.nodes.get(nodeId);
    if (n === undefined) return [];
    return [...n.instances].map((r) => ({ incarnation: r.incarnation, selection: this.selectExplicit(r.incarnation, options) }));
  }

  /** Explicit selection of every instance of a model (config removal). */
  selectModel(model: string, options: ExplicitStopOptions): { readonly incarnation: string; readonly selection: ExplicitSelection }[] {
    const set = this.byModel.get(model);
    if (set === undefined) return [];
    return [...set].map((r) => ({ incarnation: r.incarnation, selection: this.selectExplicit(r.incarnation, options) }));
  }

  /**
   * One watchdog tick, checks in LocalAI's order busy → idle → memory. Pending
   * addresses are skipped; loading and freed instances are never selected.
   * Never waits: the returned stops are the caller's to send.
   */
  tick(): TickDecision {
    const now = this.clock.now();
    const p = this.policyValue;
    const stops: StopCommand[] = [];
    const untracked: string[] = [];
    for (const address of [...this.requests.addresses()]) {
      if (this.addressPending(address)) continue;
      const rec = this.registeredAt(address);
      const busySince = this.requests.busySinceMs(address);
      if (busySince !== undefined) {
        if (!p.busyCheck || now - busySince <= p.busyTimeoutMs) continue;
        if (rec === undefined) {
          this.requests.clear(address);
          untracked.push(address);
        } else if (rec.state.t === "ready") {
          // The busy-killer ignores pins: a stuck backend must be restartable (DESIGN §3.4 item 8).
          stops.push(this.detach(rec, "busy", true, undefined));
        }
        continue;
      }
      const idleSince = this.requests.idleSinceMs(address);
      if (idleSince === undefined || now - idleSince <= p.idleTimeoutMs) continue;
      if (rec === undefined) {
        // Request state nobody owns is garbage whether or not the idle check is on: bounded memory.
        this.requests.clear(address);
        untracked.push(address);
      } else if (p.idleCheck && rec.state.t === "ready" && !this.pinned.has(rec.model)) {
        stops.push(this.detach(rec, "idle", false, undefined));
      }
    }
    const pressureChanges: PressureChange[] = [];
    for (const n of this.nodes.values()) {
      const mem = n.memory;
      if (mem === undefined) continue;
      pressureChanges.push(...mem.evaluate(now, p));
      if (!p.memoryReclaimer || mem.reclaimInFlight !== undefined || !mem.releaseWaitOver(now, p)) continue;
      const devices = mem.devicesToRelieve(p);
      if (devices.length === 0) continue;
      const victim = this.memoryVictim(n, devices);
      if (victim === undefined) continue;
      mem.reclaimInFlight = victim.incarnation;
      stops.push(this.detach(victim, "memory", this.busy(victim), undefined));
    }
    return { stops, untrackedAddresses: untracked, pressureChanges };
  }

  private memoryVictim(n: NodeRecord, devices: MemoryDevice[]): InstanceRecord | undefined {
    const all = devices.includes("ram");
    const set = new Set<MemoryDevice>(devices);
    const force = this.policyValue.forceEvictionWhenBusy;
    // Instances with no device assignment may sit on any GPU: they are candidates too.
    const candidates = [...n.instances].filter(
      (r) => r.state.t === "ready" && (all || r.gpu === undefined || set.has(r.gpu)) && !this.pinned.has(r.model) && (force || !this.busy(r)),
    );
    return this.ordered(candidates)[0];
  }

  // ---------------------------------------------------------------- settle

  /**
   * Applies a stop outcome atomically (DESIGN §3.2 step 4). For a failed stop
   * it asks `hasModelAtAddress` synchronously, in this same call. A settle for
   * an incarnation with no stop in flight is a no-op (`not-pending`).
   */
  settle(incarnation: string, outcome: StopOutcome): SettleResult {
    const rec = this.records.get(incarnation);
    if (rec?.state.t !== "pending" || rec.address === undefined) return { row: 0, t: "not-pending", incarnation };
    const pend = rec.state;
    const address = rec.address;
    const now = this.clock.now();
    const node = this.nodes.get(rec.nodeId);
    const mem = node?.memory;
    if (mem !== undefined && mem.reclaimInFlight === incarnation) {
      mem.reclaimInFlight = undefined;
      if (outcome.t !== "failed" || pend.exited) mem.lastReclaimSettledAtMs = now;
    }
    // Row 1: another incarnation was registered (or is being stopped) on this address meanwhile.
    let replacement: InstanceRecord | undefined;
    for (const r of this.atAddress.get(address) ?? []) if (r !== rec) replacement = r;
    if (replacement !== undefined) {
      const instance = this.view(rec);
      this.setState(rec, undefined);
      return { row: 1, t: "replaced", instance, replacedBy: replacement.incarnation };
    }
    if (outcome.t !== "failed" || pend.exited) {
      const instance = this.view(rec);
      this.setState(rec, undefined);
      return { row: 2, t: "stopped", instance, clearedRequestIds: this.requests.clear(address) };
    }
    if (this.loaderHolds(rec.model, address, incarnation)) {
      const state: DetachedState = outcome.freed || pend.from === "freed" ? "freed" : pend.from;
      this.setState(rec, { t: state, sinceMs: now });
      return { row: 3, t: "registered-again", instance: this.view(rec), state, error: outcome.message };
    }
    const instance = this.view(rec);
    this.setState(rec, undefined);
    return { row: 4, t: "dropped", instance, openRequestIds: this.requests.clear(address), terminalReason: "instance-dropped", error: outcome.message };
  }

  /**
   * Asks the loader. A throwing query is a bug in the caller; we answer "holds"
   * so the instance is registered again rather than forgotten: a phantom is
   * visible and retried, an amnesiac backend holds memory for good.
   */
  private loaderHolds(model: string, address: string, incarnation: string): boolean {
    try {
      return this.loader.hasModelAtAddress(model, address, incarnation);
    } catch {
      return true;
    }
  }

  // ---------------------------------------------------------------- queries

  /** Registered (loading, ready, freed) instances, pending excluded: LocalAI's loaded count. */
  loadedCount(): number {
    return this.loaded;
  }

  instance(incarnation: string): InstanceView | undefined {
    const r = this.records.get(incarnation);
    return r === undefined ? undefined : this.view(r);
  }

  /** The registered (not pending) instance at an address: the routing identity. */
  instanceAt(address: string): InstanceView | undefined {
    const r = this.registeredAt(address);
    return r === undefined ? undefined : this.view(r);
  }

  /**
   * What placement needs about one node for a load of `model` (DESIGN §3.5),
   * computed from that node's own records — no snapshot, no views — so a
   * placement decision over many nodes stays proportional to their instances.
   * `evictable` means a policy path could select it now: ready, not pending,
   * not pinned, and idle unless force-eviction-when-busy.
   */
  placementSummary(nodeId: string, model: string, groups: readonly string[]): NodePlacementSummary {
    const n = this.nodes.get(nodeId);
    if (n === undefined) return emptyPlacementSummary;
    let occupied = 0;
    let accountedBytes = 0;
    let evictableBytes = 0;
    let evictableSlots = 0;
    // Allocated only when a conflict exists: most nodes have none.
    let evictableConflicts: string[] | undefined;
    let blockingConflicts: string[] | undefined;
    const force = this.policyValue.forceEvictionWhenBusy;
    for (const r of n.instances) {
      occupied++;
      accountedBytes += r.sizeBytes;
      const ready = r.state.t === "ready";
      const pinned = this.pinned.has(r.model);
      const evictable = ready && !pinned && (force || r.address === undefined || this.requests.inFlight(r.address) === 0);
      if (evictable) {
        evictableBytes += r.sizeBytes;
        evictableSlots++;
      }
      if (groups.length > 0 && sharesGroup(model, groups, r.model, this.groupsOf(r.model))) {
        if (evictable) (evictableConflicts ??= []).push(r.model);
        else (blockingConflicts ??= []).push(`${r.model} (${r.state.t === "pending" ? "pending eviction" : pinned ? "pinned" : ready ? "busy" : r.state.t})`);
      }
    }
    for (const e of n.occupancy) {
      occupied++;
      accountedBytes += e.sizeBytes;
      if (groups.length > 0 && sharesGroup(model, groups, e.model, e.groups)) (blockingConflicts ??= []).push(`${e.kind} ${e.model ?? e.key}`);
    }
    return { occupied, accountedBytes, evictableBytes, evictableSlots, evictableConflicts: evictableConflicts ?? noStrings, blockingConflicts: blockingConflicts ?? noStrings };
  }

  instancesOfModel(model: string): InstanceView[] {
    return [...(this.byModel.get(model) ?? [])].map((r) => this.view(r));
  }

  private view(r: InstanceRecord): InstanceView {
    const s = r.state;
    const a = r.address;
    const req = a === undefined ? undefined : this.requests.view(a);
    return {
      nodeId: r.nodeId,
      model: r.model,
      incarnation: r.incarnation,
      address: a,
      state: s.t === "pending" ? s.from : s.t,
      stateSinceMs: s.sinceMs,
      pendingEviction:
        s.t === "pending" ? { reason: s.command.reason, force: s.command.force, sinceMs: s.sinceMs, command: s.command, exited: s.exited } : undefined,
      inFlight: req?.inFlight ?? 0,
      busySinceMs: req?.busySinceMs,
      idleSinceMs: req?.idleSinceMs,
      lastUsedMs: req?.lastUsedMs,
      sizeBytes: r.sizeBytes,
      gpu: r.gpu,
      pinned: this.pinned.has(r.model),
      groups: [...this.groupsOf(r.model)],
    };
  }

  /**
   * A consistent snapshot of everything (ListModels, the simulation's
   * invariant checks). Taken in one synchronous call, so it is never torn.
   */
  snapshot(): WatchdogSnapshot {
    const nodes: NodeView[] = [];
    for (const n of this.nodes.values()) {
      nodes.push({
        nodeId: n.nodeId,
        occupancy: this.occupancy(n.nodeId),
        occupancyEntries: [...n.occupancy],
        memory: n.memory?.view() ?? [],
        reclaimInFlight: n.memory?.reclaimInFlight,
      });
    }
    const addresses: AddressRequestView[] = [];
    for (const a of this.requests.addresses()) {
      const v = this.requests.view(a);
      if (v !== undefined) addresses.push(v);
    }
    return {
      atMs: this.clock.now(),
      policy: this.getPolicy(),
      loadedCount: this.loaded,
      instances: [...this.records.values()].map((r) => this.view(r)),
      addresses,
      nodes,
    };
  }
}
