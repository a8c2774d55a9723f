import { isPlanted } from "@warden/common";
import { chosenReason, explainVerdict, lacksBackend, noFitListed, noFitReason, planPlacement, type NodeCandidate, type NodeVerdict, type PlacementPlan, type PlacementRequest, type PlacementStrategy } from "@warden/placement";
import type { Loader, ModelSpec, PlacementPort } from "@warden/loader";
import type { NodeResources } from "@warden/proto";
import type { NodePlacementSummary } from "@warden/watchdog";
import { defaultMaxReplicasPerModel, type NodeLimits } from "./node-limits.js";
import { pageRange, type ExplainPage } from "./explain-page.js";
import type { NodeArtifactCache, NodeHealthState } from "./node-record.js";

/** What placement reads of a node. */
export interface PlacementNode {
  readonly nodeId: string;
  readonly state: NodeHealthState;
  readonly draining: boolean;
  readonly labels: Record<string, string>;
  readonly resources: NodeResources | undefined;
  /** Catalog backend names its agent registered with; empty when not reported (any backend). */
  readonly backends: ReadonlySet<string>;
  /** Its agent's artifact cache (free room, evictable bytes, digests held); absent or undefined = not reported. */
  readonly artifactCache?: NodeArtifactCache | undefined;
}

/** The nodes placement sees (the NodeTable), by id. */
export interface PlacementNodes {
  list(): readonly PlacementNode[];
  /** The node's effective limits (agent config, Admin override over it). */
  limitsOf(nodeId: string): NodeLimits;
  /**
   * Registered but no inventory received yet: placement waits for it. Without it a new leader
   * placed beside a backend an ex-leader started and never journaled (two members of one group on
   * one node). Absent: every node has reported.
   */
  awaitingInventory?(nodeId: string): boolean;
}

/** How a long read of every node yields: `due` throws once the caller is gone and says when a slice has run; `pause` yields. */
export interface PlacementSlicing {
  due(): boolean;
  pause(): Promise<void>;
}

/** What ExplainPlacement is told (`explainPlan`). */
export interface ExplainedPlan {
  /** The decision over every node, with its reason (no-fit: the first nodes named, the rest counted); its verdicts carry no reasons. */
  readonly plan: PlacementPlan;
  /** The page's verdicts with their reasons, in node id order. */
  readonly listed: readonly NodeVerdict[];
  /** What an admission would evict first on each listed node that has any. */
  readonly evictions: ReadonlyMap<string, readonly string[]>;
  /** Nodes weighed; of them, those the model fits now, and those it fits only after eviction. */
  readonly counts: { readonly total: number; readonly fit: number; readonly fitAfterEviction: number };
  /** The last listed node's id when a node of the page's prefix follows it. */
  readonly moreAfter?: string;
}

function placementRequestOf(spec: ModelSpec): PlacementRequest {
  return { model: spec.id, sizeBytes: spec.sizeBytes, selector: spec.selector, backend: spec.backend, spread: spec.spread, artifacts: spec.artifacts };
}

/** Replicas of one model on one node: how many, and on which GPU devices. */
interface NodeReplicas {
  count: number;
  readonly gpus: Set<number>;
  /** Replicas whose device is not known (no GPU index, a leftover): each counts as a device of its own. */
  unknownDevice: number;
  /** Of those, what the watchdog's summary counts as evictable: evicting a replica to place another of the same model makes no room. */
  evictableBytes: number;
  evictableSlots: number;
  /** Of those, ones on their way out (pending eviction, freed, leftovers) or not confirmed (journal only): a state that ends. */
  departing: number;
}

function replicasAt(by: Map<string, NodeReplicas>, nodeId: string): NodeReplicas {
  let r = by.get(nodeId);
  if (r === undefined) {
    r = { count: 0, gpus: new Set(), unknownDevice: 0, evictableBytes: 0, evictableSlots: 0, departing: 0 };
    by.set(nodeId, r);
  }
  return r;
}

function labelsMatch(labels: Readonly<Record<string, string>>, selector: Readonly<Record<string, string>>): boolean {
  for (const k in selector) if (labels[k] !== selector[k]) return false;
  return true;
}

/**
 * Feeds the pure placement planner with the node table's and the watchdog's
 * view of each node. The loader's PlacementPort and ExplainPlacement both go
 * through `plan`, so an explanation agrees with what a load does.
 */
export class PlacementView implements PlacementPort {
  private loader: Loader | undefined;

  constructor(
    private readonly nodes: PlacementNodes,
    private readonly strategy: PlacementStrategy,
  ) {}

  attach(loader: Loader): void {
    this.loader = loader;
  }

  /**
   * One candidate per node, each from that node's own watchdog records
   * (`placementSummary`): proportional to the cluster's instances, no
   * snapshot per decision.
   */
  candidates(spec: ModelSpec, explain = true): NodeCandidate[] {
    const limit = this.loader?.getPolicy().limitPerNode ?? 0;
    const replicas = this.replicasByNode(spec.id);
    const out: NodeCandidate[] = [];
    // A plain loop with no per-node closures: this runs per node on every load.
    for (const n of this.nodes.list()) {
      // A node the hard constraints exclude is rejected whatever its load: when no
      // explanation is wanted it is left out before its instances are read.
      if (!explain && (n.state !== "ready" || n.draining || !labelsMatch(n.labels, spec.selector) || lacksBackend(spec, n) || this.awaiting(n.nodeId))) continue;
      out.push(this.candidateOf(n, limit, replicas.get(n.nodeId), this.loader?.core.placementSummary(n.nodeId, spec.id, spec.groups)));
    }
    return out;
  }

  /** PlacementPort: registered without an inventory yet (a load naming the node waits for it). */
  awaitingInventory(nodeId: string): boolean {
    return this.awaiting(nodeId);
  }

  /** Registered without an inventory yet: placement waits for it. */
  private awaiting(nodeId: string): boolean {
    if (isPlanted("place-before-inventory")) return false;
    return this.nodes.awaitingInventory?.(nodeId) === true;
  }

  /** One node's candidate, from that node's own watchdog records (`sum`) and its replicas of the model. */
  private candidateOf(n: PlacementNode, limit: number, here: NodeReplicas | undefined, sum: NodePlacementSummary | undefined): NodeCandidate {
    let memoryTotalBytes = 0;
    let memoryUsedBytes = 0;
    const r = n.resources;
    if (r !== undefined) {
      if (r.gpus.length > 0) {
        for (const g of r.gpus) {
          memoryTotalBytes += Number(g.totalBytes);
          memoryUsedBytes += Number(g.usedBytes);
        }
      } else {
        memoryTotalBytes = Number(r.ramTotalBytes);
        memoryUsedBytes = Number(r.ramUsedBytes);
      }
    }
    const limits = this.nodes.limitsOf(n.nodeId);
    const devices = r !== undefined && r.gpus.length > 0 ? r.gpus.length : 1;
    // Every field set in one literal, the optional ones assigned after: no spreads, which build each
    // candidate through a copy (an explanation builds one per node).
    const c: { -readonly [K in keyof NodeCandidate]: NodeCandidate[K] } = {
      nodeId: n.nodeId,
      state: n.state,
      draining: n.draining,
      labels: n.labels,
      memoryTotalBytes,
      memoryUsedBytes,
      reservedBytes: sum?.accountedBytes ?? 0,
      occupied: sum?.occupied ?? 0,
      limit,
      evictableConflicts: sum?.evictableConflicts ?? [],
      blockingConflicts: sum?.blockingConflicts ?? [],
      evictableBytes: Math.max(0, (sum?.evictableBytes ?? 0) - (here?.evictableBytes ?? 0)),
      evictableSlots: Math.max(0, (sum?.evictableSlots ?? 0) - (here?.evictableSlots ?? 0)),
      backends: n.backends,
      modelReplicas: here?.count ?? 0,
      departingReplicas: here?.departing ?? 0,
      maxReplicasPerModel: limits.maxReplicasPerModel ?? defaultMaxReplicasPerModel,
      devices,
      devicesWithReplica: here === undefined ? 0 : here.gpus.size + here.unknownDevice,
    };
    if (this.awaiting(n.nodeId)) c.awaitingInventory = true;
    if (limits.memoryBudget !== undefined) c.memoryBudget = limits.memoryBudget;
    const cache = n.artifactCache;
    if (cache !== undefined) {
      c.diskFreeBytes = cache.freeBytes;
      c.diskEvictableBytes = cache.evictableBytes;
      if (cache.digests !== undefined) c.cachedDigests = cache.digests;
      if (cache.bundles !== undefined) c.backendBundles = cache.bundles;
    }
    return c;
  }

  /**
   * Replicas of `model` per node: its instances in every state (a reserved or
   * loading one holds its place, and a pending one is still there until its
   * stop settles), its leftovers (a leftover replica counts on its node), the
   * journal's unconfirmed ones on nodes that have not reported yet, and loads
   * a node reports starting that this coordinator does not know.
   * Proportional to the model's instances and the leftovers, not the cluster.
   */
  private replicasByNode(model: string): Map<string, NodeReplicas> {
    const by = new Map<string, NodeReplicas>();
    const loader = this.loader;
    if (loader === undefined) return by;
    const force = loader.getPolicy().forceEvictionWhenBusy;
    for (const v of loader.core.instancesOfModel(model)) {
      const r = replicasAt(by, v.nodeId);
      r.count++;
      if (v.pendingEviction !== undefined || v.state === "freed") r.departing++;
      // The watchdog summary's own rule for evictable (ready, not pending, not pinned, idle unless forced).
      if (v.state === "ready" && v.pendingEviction === undefined && !v.pinned && (force || v.inFlight === 0)) {
        r.evictableBytes += v.sizeBytes;
        r.evictableSlots++;
      }
      if (v.gpu === undefined) r.unknownDevice++;
      else r.gpus.add(v.gpu);
    }
    for (const l of loader.leftoverList()) {
      if (l.model !== model) continue;
      const r = replicasAt(by, l.nodeId);
      r.count++;
      r.unknownDevice++;
      r.departing++;
    }
    // Known only from a restarted coordinator's journal, on a node that has not reported yet.
    for (const u of loader.journalReplicas.ofModel(model)) {
      const r = replicasAt(by, u.nodeId);
      r.count++;
      r.unknownDevice++;
      r.departing++;
    }
    // Reported starting by its node, unknown here (starting-elsewhere.ts): a previous leader's load.
    for (const nodeId of loader.startingElsewhere(model)) {
      const r = replicasAt(by, nodeId);
      r.count++;
      r.unknownDevice++;
    }
    return by;
  }

  plan(spec: ModelSpec, explain = true): PlacementPlan {
    return planPlacement(placementRequestOf(spec), this.candidates(spec, explain), this.strategy, { explain });
  }

  /**
   * The loader's choice. When nothing fits outright or after eviction, the
   * first eligible node (ready, not draining, selector matching, the backend
   * in its agent's catalog when it reported one, spread and
   * maxReplicasPerModel allowing another replica, its memory budget able to
   * hold the model after eviction) is still returned so the watchdog's
   * admission reports the precise shortfall and the need-more loop waits and
   * re-plans. Never a node the model's spread or the node's limits rule out.
   */
  choose(spec: ModelSpec): { readonly nodeId: string } | { readonly nodeId: undefined; readonly reason: string; readonly transient?: true } {
    const plan = this.plan(spec, false);
    if (plan.t !== "no-fit") return { nodeId: plan.nodeId };
    // Unexplained verdicts keep the node table's order, as before; a node
    // without a replica of the model first (spread any/gpu's preference).
    let eligible: NodeVerdict | undefined;
    for (const v of plan.verdicts) if (v.eligible && (eligible === undefined || v.spreadTier < eligible.spreadTier)) eligible = v;
    if (eligible !== undefined) return { nodeId: eligible.nodeId };
    // No node is ready (none registered yet, or every one unreachable, as
    // while a new leader's agents re-register): nothing judged the model, so
    // the failure is the cluster's state now, not the model's (transient).
    // So is a node the model could use but for a state that ends (draining, unreachable): wait for it.
    // The explained plan judges every node (the quick one leaves the excluded out).
    const explained = this.plan(spec);
    const transient = !this.anyNodeReady() || explained.verdicts.some((v) => v.waitable === true);
    return { nodeId: undefined, reason: explained.reason, ...(transient ? { transient: true as const } : {}) };
  }

  /** Whether some node is ready: without one, no node judged a model and a no-fit is the cluster's state now (transient). */
  anyNodeReady(): boolean {
    for (const n of this.nodes.list()) if (n.state === "ready") return true;
    return false;
  }

  /**
   * An explanation: the plan over every node, its reason explained, with one
   * page of the nodes' verdicts explained (reasons, and what an admission
   * there would evict first) and how many nodes fit, now or after eviction.
   * Each node's records are read once: a listed node's candidate and its
   * evictions together, the others' candidates alone (as a load's choice reads
   * them), so an explanation stays linear in nodes + instances and its
   * explaining work in the page. With `slicing`, the nodes are read in slices,
   * yielding between nodes (read-only: a node is read as it is when reached).
   */
  async explainPlan(spec: ModelSpec, page: ExplainPage, slicing?: PlacementSlicing): Promise<ExplainedPlan> {
    const limit = this.loader?.getPolicy().limitPerNode ?? 0;
    const replicas = this.replicasByNode(spec.id);
    const list: NodeCandidate[] = [];
    const evictions = new Map<string, readonly string[]>();
    const evict = { limit };
    const all = this.nodes.list();
    const range = pageRange(all, page);
    // Indexed: an array iterator in an async function allocates a result per step once it can await.
    for (let i = 0; i < all.length; i++) {
      const n = all[i] as PlacementNode;
      if (slicing?.due() === true) await slicing.pause();
      const listed = i >= range.from && i < range.to;
      const sum = this.loader?.core.placementSummary(n.nodeId, spec.id, spec.groups, listed ? evict : undefined);
      list.push(this.candidateOf(n, limit, replicas.get(n.nodeId), sum));
      if (listed && sum?.evictions !== undefined && sum.evictions.length > 0) evictions.set(n.nodeId, sum.evictions);
    }
    const req = placementRequestOf(spec);
    // The decision without reasons (a load's own choice), then reasons for the page and the plan alone.
    const quick = planPlacement(req, list, this.strategy, { explain: false });
    let fit = 0;
    let fitAfterEviction = 0;
    for (const v of quick.verdicts) {
      if (v.fits) fit++;
      else if (v.fitsAfterEviction) fitAfterEviction++;
    }
    const explainAt = (i: number): NodeVerdict => explainVerdict(req, list[i] as NodeCandidate, this.strategy);
    const listed: NodeVerdict[] = [];
    for (let i = range.from; i < range.to; i++) listed.push(explainAt(i));
    let reason: string;
    if (quick.t === "no-fit") reason = noFitReason(Array.from({ length: Math.min(noFitListed, list.length) }, (_, i) => explainAt(i)), list.length);
    else {
      const chosen = quick.nodeId;
      reason = chosenReason(explainAt(list.findIndex((c) => c.nodeId === chosen)));
    }
    return { plan: { ...quick, reason }, listed, evictions, counts: { total: list.length, fit, fitAfterEviction }, ...(range.more && range.to > range.from ? { moreAfter: (all[range.to - 1] as PlacementNode).nodeId } : {}) };
  }

  /** Instances (model@incarnation) an admission on `nodeId` would evict first: group conflicts, then least recently used. */
  wouldEvict(spec: ModelSpec, nodeId: string): string[] {
    const loader = this.loader;
    if (loader === undefined || !this.nodes.list().some((n) => n.nodeId === nodeId)) return [];
    return [...(loader.core.placementSummary(nodeId, spec.id, spec.groups, { limit: loader.getPolicy().limitPerNode }).evictions ?? [])];
  }
}
