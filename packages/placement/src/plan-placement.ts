import { describePull, diskExclusion, pullNeedOf, type ArtifactNeed, type DiskFacts, type PullNeed } from "./artifact-locality.js";
import { budgetBytes, describeBudget, freeBytesOf, replicaExclusion, spreadTier, type ReplicaFacts, type SpreadMode } from "./replica-constraints.js";

/** What placement needs to know about one node, computed by the caller from the registry and the watchdog. */
export interface NodeCandidate extends ReplicaFacts, DiskFacts {
  readonly nodeId: string;
  readonly state: "ready" | "unreachable" | "lost";
  readonly draining: boolean;
  readonly labels: Readonly<Record<string, string>>;
  /** Sum of the node's GPU memory (or RAM without GPUs); 0 when unknown. */
  readonly memoryTotalBytes: number;
  /** Reported use from the last heartbeat. */
  readonly memoryUsedBytes: number;
  /** Estimates of everything the watchdog holds there (reserved, loading, ready, freed, pending, leftovers, orphans). */
  readonly reservedBytes: number;
  /** Occupied slots and the per-node limit (0 = unlimited). */
  readonly occupied: number;
  readonly limit: number;
  /** Instances on the node in a group the model shares that eviction could remove. */
  readonly evictableConflicts: readonly string[];
  /** Leftovers / orphans / pinned or loading instances in a shared group: eviction cannot clear them now. */
  readonly blockingConflicts: readonly string[];
  /** Bytes evictable instances hold (for "evict then place"). */
  readonly evictableBytes: number;
  /** Slots evictable instances hold. */
  readonly evictableSlots: number;
  /**
   * Catalog backend names the node's agent registered with. Empty or absent:
   * not known (an agent older than RegisterRequest.backends sends none), so the node is taken as
   * able to start any backend, as before.
   */
  readonly backends?: ReadonlySet<string>;
  /**
   * Registered, but its first inventory has not arrived: what runs there is not known yet (a start
   * an earlier leader sent that its journal never recorded may be running). Ruled out until it
   * reports, like a state that ends by itself. Absent: reported.
   */
  readonly awaitingInventory?: boolean;
}

export interface PlacementRequest {
  readonly model: string;
  readonly sizeBytes: number;
  readonly selector: Readonly<Record<string, string>>;
  /** Catalog backend the model runs on; a node whose agent lacks it is excluded. */
  readonly backend?: string;
  /** Anti-affinity of the model's replicas. @default "any" */
  readonly spread?: SpreadMode;
  /**
   * Files the model names by digest: a node must have disk room for what it
   * lacks (plus its backend's bundle when the node reported it not
   * installed), and one holding them is preferred.
   */
  readonly artifacts?: readonly ArtifactNeed[];
}

export type PlacementStrategy = "binpack" | "spread";

export interface NodeVerdict {
  readonly nodeId: string;
  readonly fits: boolean;
  /** Could fit after evicting instances there. */
  readonly fitsAfterEviction: boolean;
  readonly reason: string;
  readonly freeBytes: number;
  readonly score: number;
  /**
   * Passes the hard constraints (ready, not draining, selector, backend,
   * spread, maxReplicasPerModel, memory budget even after eviction): a load
   * that fits nowhere may still target it so admission reports the shortfall.
   */
  readonly eligible: boolean;
  /** Spread preference, ahead of the score: 0 no replica of the model here, 1 a device without one, 2 none (see `spreadTier`). */
  readonly spreadTier: number;
  /** Bytes of the model's artifacts and its backend's bundle the node's cache lacks: among equal spread tiers, fewer wins (locality), ahead of the score. */
  readonly pullBytes?: number;
  /** The model's backend bundle is not installed there (any size, known or not): among equal pull bytes, a node with it installed wins. */
  readonly bundleMissing?: true;
  /**
   * Ruled out only by a state that ends by itself (draining, unreachable, no inventory yet, its
   * memory budget full of instances eviction cannot remove now, the model's
   * own replicas there at its maxReplicasPerModel or spread while some of
   * them are on their way out) while its
   * selector and backend match: a load may wait for it (transient),
   * unlike a node the model can never use.
   */
  readonly waitable?: true;
}

export type PlacementPlan =
  | { readonly t: "place"; readonly nodeId: string; readonly reason: string; readonly verdicts: readonly NodeVerdict[] }
  | { readonly t: "evict-then-place"; readonly nodeId: string; readonly reason: string; readonly verdicts: readonly NodeVerdict[] }
  | { readonly t: "no-fit"; readonly reason: string; readonly verdicts: readonly NodeVerdict[] };

/** A node a hard constraint rules out. Module functions rather than closures: this runs per node per load. */
function excluded(n: NodeCandidate, freeBytes: number, reason: string, eligible = false): NodeVerdict {
  return { nodeId: n.nodeId, fits: false, fitsAfterEviction: false, reason, freeBytes: Number.isFinite(freeBytes) ? freeBytes : 0, score: 0, eligible, spreadTier: eligible ? spreadTier(n) : 0 };
}

/**
 * The node's agent registered a catalog without the model's backend: a start
 * there can only fail. An empty catalog is an older agent's (not reported): any.
 */
export function lacksBackend(req: Pick<PlacementRequest, "backend">, n: Pick<NodeCandidate, "backends">): boolean {
  return req.backend !== undefined && n.backends !== undefined && n.backends.size > 0 && !n.backends.has(req.backend);
}

/** Selector and backend match: what a node's state change cannot alter. */
function staticMatch(req: PlacementRequest, n: NodeCandidate): boolean {
  for (const k in req.selector) if (n.labels[k] !== req.selector[k]) return false;
  return !lacksBackend(req, n);
}

/**
 * Lower spread tier wins, then fewer bytes to pull (a node holding the
 * artifacts and the backend's bundle), then a node with the bundle installed
 * (a bundle of unknown size counts 0 bytes), then the higher score; equal
 * scores go to the smaller node id, so a plan is deterministic.
 */
function better(v: NodeVerdict, b: NodeVerdict | undefined): boolean {
  if (b === undefined) return true;
  if (v.spreadTier !== b.spreadTier) return v.spreadTier < b.spreadTier;
  if ((v.pullBytes ?? 0) !== (b.pullBytes ?? 0)) return (v.pullBytes ?? 0) < (b.pullBytes ?? 0);
  if (v.bundleMissing !== b.bundleMissing) return v.bundleMissing === undefined;
  return v.score > b.score || (v.score === b.score && v.nodeId < b.nodeId);
}

function verdict(req: PlacementRequest, n: NodeCandidate, strategy: PlacementStrategy, explain: boolean): NodeVerdict {
  const used = Math.max(n.memoryUsedBytes, n.reservedBytes);
  const budget = budgetBytes(n);
  const freeBytes = freeBytesOf(n.memoryTotalBytes, budget, used);
  // Reason strings only when explaining: a load's choice allocates none.
  if (n.state !== "ready" || n.draining) {
    const out = excluded(n, freeBytes, explain ? (n.state !== "ready" ? `node is ${n.state}` : "node is draining") : "");
    return n.state !== "lost" && staticMatch(req, n) ? { ...out, waitable: true } : out;
  }
  for (const k in req.selector) {
    const v = req.selector[k];
    if (n.labels[k] !== v) return excluded(n, freeBytes, explain ? `selector ${k}=${v ?? ""} does not match (node has ${k}=${n.labels[k] ?? "<unset>"})` : "");
  }
  if (lacksBackend(req, n)) return excluded(n, freeBytes, explain ? `agent has no backend ${JSON.stringify(req.backend)} in its catalog` : "");
  // After the static rules: a node that can never take the model says why, not "wait for its report".
  if (n.awaitingInventory === true) return { ...excluded(n, freeBytes, explain ? "node has not reported its backends since it registered" : ""), waitable: true };
  // Larger than the node could ever hold (its memory, or its budget): never, whatever is evicted.
  const capacity = capacityBytes(n.memoryTotalBytes, budget);
  if (req.sizeBytes > capacity) return excluded(n, freeBytes, explain ? `model needs ${String(req.sizeBytes)} bytes, more than the node holds (${budget === undefined ? `${String(capacity)} bytes of memory` : `its ${describeBudget(n)}`})` : "");
  // The model's replicas on the node rule it out for one more. When some of them are on their way
  // out (a leftover whose stop is retried, a pending eviction, a journal-only one), that ends by
  // itself: a load may wait for it rather than be refused as if no node could ever take the model.
  const spreadOut = replicaExclusion(req.model, req.spread ?? "any", n, explain);
  if (spreadOut !== undefined) return (n.departingReplicas ?? 0) > 0 ? { ...excluded(n, freeBytes, spreadOut), waitable: true } : excluded(n, freeBytes, spreadOut);
  // The budget is a cap the operator set: a node where even eviction cannot
  // bring the model under it is ruled out, never a fallback target. The model
  // fits the budget (above), so what fills it (pinned, busy, loading
  // instances) may go: a state that ends, so a load may wait for it.
  if (budget !== undefined && req.sizeBytes > freeBytes + n.evictableBytes) {
    return { ...excluded(n, freeBytes, explain ? `over its ${describeBudget(n)}: needs ${String(req.sizeBytes)} bytes, ${describeFree(freeBytes)} free within it, eviction cannot make room` : ""), waitable: true };
  }
  // Disk: a node whose cache cannot make room for what it must pull (artifacts and bundle) can only fail the start.
  const pull = pullNeedOf(req.artifacts, req.backend, n);
  const pullBytes = pull.bytes;
  const missing = pull.bundle === "missing" || pull.bundle === "unknown";
  const diskOut = diskExclusion(pull, n, explain);
  if (diskOut !== undefined) return excluded(n, freeBytes, diskOut);
  if (n.blockingConflicts.length > 0) return excluded(n, freeBytes, explain ? `group conflict that eviction cannot resolve now: ${n.blockingConflicts.join(", ")}` : "", true);
  const memOk = req.sizeBytes <= freeBytes;
  const slotOk = n.limit === 0 || n.occupied + 1 <= n.limit;
  const conflictFree = n.evictableConflicts.length === 0;
  // binpack: least free memory left after placing; spread: most.
  const after = Number.isFinite(freeBytes) ? freeBytes - req.sizeBytes : Number.MAX_SAFE_INTEGER / 2;
  const score = strategy === "binpack" ? -after : after;
  const freeOut = Number.isFinite(freeBytes) ? freeBytes : 0;
  const tier = spreadTier(n);
  if (memOk && slotOk && conflictFree) {
    return withBundle({ nodeId: n.nodeId, fits: true, fitsAfterEviction: true, reason: explain ? `fits (${describeFree(freeBytes)} free${withinBudget(n)}, ${String(n.occupied)}/${n.limit === 0 ? "∞" : String(n.limit)} slots${describeTier(req.model, n)}${pullNote(req, pull)})` : "", freeBytes: freeOut, score, eligible: true, spreadTier: tier, pullBytes }, missing);
  }
  // What the node lacks, "; "-separated: built as one string (no list per node: an explanation has a verdict per node).
  let needs = "";
  if (explain) {
    if (!conflictFree) needs = `group conflict with ${n.evictableConflicts.join(", ")}`;
    if (!slotOk) needs += `${needs === "" ? "" : "; "}limit reached (${String(n.occupied)}/${String(n.limit)})`;
    if (!memOk) needs += `${needs === "" ? "" : "; "}needs ${String(req.sizeBytes)} bytes, ${describeFree(freeBytes)} free${withinBudget(n)}`;
  }
  const memAfter = req.sizeBytes <= freeBytes + n.evictableBytes;
  const slotAfter = n.limit === 0 || n.occupied + 1 - n.evictableSlots <= n.limit;
  const fitsAfterEviction = memAfter && slotAfter;
  return withBundle(
    {
      nodeId: n.nodeId,
      fits: false,
      fitsAfterEviction,
      reason: explain ? `${needs}${fitsAfterEviction ? " — evicting there would make room" : " — eviction cannot make room"}${describeTier(req.model, n)}${pullNote(req, pull)}` : "",
      freeBytes: freeOut,
      score: score - (strategy === "binpack" ? 0 : n.evictableBytes),
      eligible: true,
      spreadTier: tier,
      pullBytes,
    },
    missing,
  );
}

/** The verdict, with `bundleMissing` when the backend's bundle must be pulled: assigned, not spread (a verdict per node per decision). */
function withBundle(v: { -readonly [K in keyof NodeVerdict]: NodeVerdict[K] }, missing: boolean): NodeVerdict {
  if (missing) v.bundleMissing = true;
  return v;
}

/** "; cached", "; pull 4.2 GiB", "; pull 5.2 GiB (bundle 1.0 GiB)", "; bundle cached" after a node's reason when the model names artifacts or its backend a bundle. */
function pullNote(req: PlacementRequest, pull: PullNeed): string {
  const d = describePull(req.artifacts, pull);
  return d === "" ? "" : `; ${d}`;
}

function withinBudget(n: NodeCandidate): string {
  return n.memoryBudget === undefined ? "" : ` within its ${describeBudget(n)}`;
}

/** Says when the node already holds a replica (spread any/gpu prefer nodes, then devices, without one). */
function describeTier(model: string, n: NodeCandidate): string {
  if (n.modelReplicas === 0) return "";
  return `; holds ${String(n.modelReplicas)} replica(s) of ${model} already, ${n.devicesWithReplica < n.devices ? "on other devices" : "on every device"}`;
}

/** The most the node could ever hold: its memory, capped by its budget; +∞ when neither is known. */
function capacityBytes(totalBytes: number, budget: number | undefined): number {
  if (budget !== undefined) return totalBytes > 0 ? Math.min(totalBytes, budget) : budget;
  return totalBytes > 0 ? totalBytes : Number.POSITIVE_INFINITY;
}

function describeFree(bytes: number): string {
  return Number.isFinite(bytes) ? `${String(bytes)} bytes` : "unknown memory";
}

/**
 * DESIGN §3.5: per node — ready, not draining, selector matches, its agent's
 * catalog has the model's backend (when the agent reported one), the model's
 * spread and the node's maxReplicasPerModel allow another replica,
 * no group conflict eviction cannot resolve (leftovers and orphans included),
 * memory estimate fits `min(total, budget) − max(reported use, reservations)`,
 * its artifact cache can make room for what it lacks of the model's files and
 * its backend's bundle, a free slot. Among the nodes that fit, those without
 * a replica of the model first (then a device without one), then fewer bytes
 * to pull (then the bundle installed), then binpack or spread; else plan
 * evictions on the best node where eviction would make room. Pure: ExplainPlacement and a real load ask the same
 * function, so they agree.
 */
export function planPlacement(req: PlacementRequest, nodes: readonly NodeCandidate[], strategy: PlacementStrategy, options: { readonly explain?: boolean } = {}): PlacementPlan {
  // Reasons are for people (ExplainPlacement); a load's choice skips building them.
  const explain = options.explain ?? true;
  // One pass: verdicts, the best fitting node and the best node after eviction.
  const verdicts: NodeVerdict[] = [];
  let fit: NodeVerdict | undefined;
  let evict: NodeVerdict | undefined;
  for (const n of nodes) {
    const v = verdict(req, n, strategy, explain);
    verdicts.push(v);
    if (v.fits && better(v, fit)) fit = v;
    if (v.fitsAfterEviction && better(v, evict)) evict = v;
  }
  if (explain) verdicts.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  if (fit !== undefined) return { t: "place", nodeId: fit.nodeId, reason: explain ? chosenReason(fit) : "", verdicts };
  if (evict !== undefined) return { t: "evict-then-place", nodeId: evict.nodeId, reason: explain ? chosenReason(evict) : "", verdicts };
  if (verdicts.length === 0) return { t: "no-fit", reason: "no node is registered", verdicts };
  if (!explain) return { t: "no-fit", reason: "no node fits", verdicts };
  return { t: "no-fit", reason: noFitReason(verdicts.slice(0, noFitListed), verdicts.length), verdicts };
}

/**
 * Nodes whose reasons a no-fit plan's reason lists (the first in node id
 * order); the rest are counted. At 10 000 nodes the whole list was a reason of
 * about a megabyte, in the answer's header and in every log line quoting it.
 */
export const noFitListed = 10;

/** A node's verdict with its reason, as an explanation gives it (`planPlacement` with `explain` false builds none). */
export function explainVerdict(req: PlacementRequest, n: NodeCandidate, strategy: PlacementStrategy): NodeVerdict {
  return verdict(req, n, strategy, true);
}

/** The reason of a plan that places on (or evicts on) the node of this explained verdict. */
export function chosenReason(v: Pick<NodeVerdict, "nodeId" | "reason">): string {
  return `node "${v.nodeId}": ${v.reason}`;
}

/** The reason of a no-fit plan over `total` nodes, `listed` being the first of them explained (at most `noFitListed` are named). */
export function noFitReason(listed: readonly Pick<NodeVerdict, "nodeId" | "reason">[], total: number): string {
  if (total === 0) return "no node is registered";
  const named = listed.slice(0, noFitListed);
  const more = total - named.length;
  return `no node fits: ${named.map((v) => `${v.nodeId}: ${v.reason}`).join("; ")}${more > 0 ? `; … and ${String(more)} more node${more === 1 ? "" : "s"}` : ""}`;
}
