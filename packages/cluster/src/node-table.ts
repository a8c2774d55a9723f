import { capExceeded } from "@warden/common";
import type { AgentDirectory, AgentPort, InventoryAnswer, InventoryHit, InventoryPort, Loader } from "@warden/loader";
import { BackendState, type InventoryEntry } from "@warden/proto";
import { invalidArgument, permissionDenied } from "@warden/common";
import { heartbeatOrder, sequenceOutOfBounds } from "./heartbeat-order.js";
import { fenceIncarnation, maxFencesPerNode, unfencedInventory } from "./incarnation-fences.js";
import { keepMeasuredAt, memoryReading, sameReadings } from "./memory-reading.js";
import { massUnreachability, nextHealth, type HealthCause } from "./node-health.js";
import type { HeartbeatAnswer, HeartbeatReport, NodeRecord, NodeRegistration } from "./node-record.js";
import { awaitsInventory } from "./node-record.js";
import { artifactCacheOf } from "./artifact-cache-report.js";
import { applyInventoryDelta, fullReported, type ReportedInventory } from "./inventory-delta.js";
import { freshForeign } from "./fresh-foreign.js";
import { goneIntents, untracked } from "./gone-intents.js";
import { OrphanTracker } from "./orphan-tracker.js";
import { otherNodesIncarnation, reconcileInventory } from "./reconcile-inventory.js";
import { nodeOccupancy } from "./starting-elsewhere.js";
import { settledMark, unchangedHeartbeat } from "./unchanged-heartbeat.js";
import type { NodeLimits } from "./node-limits.js";
import type { NodeTableOptions } from "./node-table-options.js";
import { registeredRecord } from "./registered-record.js";

export type { NodeEventKind, NodeTableOptions } from "./node-table-options.js";

/**
 * Registered agents: registration, heartbeats ((boot epoch, sequence) ordered,
 * older ignored), health states, and reconciliation of each inventory with the
 * loader — unknown valid incarnations adopted (remote-only, or leftover when a
 * stop was requested or a stop intent is open), exited or twice-missing
 * instances removed through the watchdog, twice-missing open stop intents
 * the loader no longer tracks reported done. Also the loader's AgentDirectory
 * and InventoryPort. Pure: agents are reached through the AgentConnector.
 */
export class NodeTable<C> implements AgentDirectory, InventoryPort {
  private readonly nodes = new Map<string, NodeRecord<C>>();
  /**
   * Operators' placement-limit overrides by node id. Apart from the
   * records: an override restored from the journal at start, or set for a node
   * that is restarting, applies once it registers, and a re-registration keeps it.
   */
  private readonly limitOverrides = new Map<string, NodeLimits>();
  private paused = false;
  private sorted: readonly NodeRecord<C>[] | undefined;
  private readonly orphans: OrphanTracker;
  private loader: Loader | undefined;
  private openIntent: (incarnation: string) => boolean = () => false;
  /** Cap on registered nodes (client-keyed). */
  static readonly maxNodes = 4096;
  /** Cap on open fences per node (confirmed stops within about one heartbeat). */
  static readonly maxFencesPerNode = maxFencesPerNode;

  constructor(private readonly o: NodeTableOptions<C>) {
    this.orphans = new OrphanTracker({
      graceMs: o.orphanGraceMs ?? 120_000,
      ...(o.onOrphansAdopted === undefined ? {} : { onAdopted: o.onOrphansAdopted }),
      ...(o.onOrphan === undefined ? {} : { onOrphan: o.onOrphan }),
    });
  }

  attach(loader: Loader, openIntent: (incarnation: string) => boolean): void {
    this.loader = loader;
    this.openIntent = openIntent;
    // Marks name another loader's stamps.
    for (const n of this.nodes.values()) n.settled = undefined;
  }

  /** Nodes by id; cached between registrations (placement asks on every load). */
  list(): readonly NodeRecord<C>[] {
    this.sorted ??= [...this.nodes.values()].sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
    return this.sorted;
  }

  get(nodeId: string): NodeRecord<C> | undefined {
    return this.nodes.get(nodeId);
  }

  // AgentDirectory
  /** Replaces the operator's override for a node; an empty one removes it. The caller validates and journals. */
  setLimitsOverride(nodeId: string, limits: NodeLimits): void {
    if (limits.maxReplicasPerModel === undefined && limits.memoryBudget === undefined) this.limitOverrides.delete(nodeId);
    else this.limitOverrides.set(nodeId, limits);
  }

  limitsOverride(nodeId: string): NodeLimits {
    return this.limitOverrides.get(nodeId) ?? {};
  }

  /** Every operator override, by node id (a node not registered since a restart included). */
  limitsOverrides(): ReadonlyMap<string, NodeLimits> {
    return this.limitOverrides;
  }

  /** The node's effective limits: the override field by field over the agent's. */
  limitsOf(nodeId: string): NodeLimits {
    const agent = this.nodes.get(nodeId)?.agentLimits ?? {};
    const o = this.limitOverrides.get(nodeId);
    if (o === undefined) return agent;
    return { ...agent, ...(o.maxReplicasPerModel === undefined ? {} : { maxReplicasPerModel: o.maxReplicasPerModel }), ...(o.memoryBudget === undefined ? {} : { memoryBudget: o.memoryBudget }) };
  }

  agent(nodeId: string): AgentPort | undefined {
    const n = this.nodes.get(nodeId);
    return n === undefined || n.state === "lost" ? undefined : n.port;
  }

  isLocal(nodeId: string): boolean {
    return this.nodes.get(nodeId)?.embedded === true;
  }

  /** PlacementNodes: registered, and no inventory applied since (placement waits for it). */
  awaitingInventory(nodeId: string): boolean {
    const n = this.nodes.get(nodeId);
    return n !== undefined && awaitsInventory(n);
  }

  /**
   * Whether the instance's last reported bundle digest differs from the one
   * its node's catalog names for `backend` now (AgentDirectory.bundleStale).
   * False when either is unknown: an instance is replaced only on the node's
   * word. O(1).
   */
  bundleStale(nodeId: string, incarnation: string, backend: string): boolean {
    const n = this.nodes.get(nodeId);
    const now = n?.bundles.get(backend);
    const started = n?.reported?.entries.get(incarnation)?.entry.bundleDigest;
    return now !== undefined && started !== undefined && started !== "" && started !== now;
  }

  isReachable(nodeId: string): boolean {
    return this.nodes.get(nodeId)?.state === "ready";
  }

  // InventoryPort
  findModel(model: string): InventoryAnswer {
    const hits: InventoryHit[] = [];
    for (const n of this.nodes.values()) {
      if (n.state === "lost") continue;
      if (n.inventory === undefined) return { t: "unknown", reason: `node "${n.nodeId}" has not reported an inventory yet`, noInventoryYet: true };
      const found = n.inventory.filter((e) => e.model === model && e.state !== BackendState.EXITED && this.loader?.isGone(e.incarnation) !== true);
      if (found.length > 0 && n.state === "unreachable") return { t: "unknown", reason: `node "${n.nodeId}" is unreachable and its last inventory had "${model}"` };
      for (const e of found) hits.push({ nodeId: n.nodeId, address: e.address, incarnation: e.incarnation, ready: e.state === BackendState.READY && e.stopRequested === undefined });
    }
    return hits.length > 0 ? { t: "found", hits } : { t: "absent" };
  }

  /**
   * The loader confirmed `incarnation` gone (InventoryPort): fence it at the
   * sequence seen now, and drop it from the stored inventory, which predates
   * the confirmation.
   */
  confirmedGone(nodeId: string, incarnation: string): void {
    const n = this.nodes.get(nodeId);
    if (n === undefined) return;
    fenceIncarnation(n.fences, incarnation, n.sequence);
    if (n.inventory?.some((e) => e.incarnation === incarnation) === true) n.inventory = n.inventory.filter((e) => e.incarnation !== incarnation);
    n.missing.delete(incarnation);
  }

  /** Registers (or re-registers) a node. */
  register(init: NodeRegistration<C>): NodeRecord<C> {
    const existing = this.nodes.get(init.nodeId);
    const maxNodes = this.o.maxNodes ?? NodeTable.maxNodes;
    if (existing === undefined && this.nodes.size >= maxNodes) throw capExceeded("node_id", `too many nodes (cap ${String(maxNodes)}); a new node cannot register`);
    const version = init.version ?? "";
    if (this.o.version !== undefined && version !== this.o.version && existing?.version !== version) this.o.onVersionMismatch?.(init.nodeId, version);
    // Copies: the record must not share objects with a request (validated by
    // the caller against its bounds before it gets here).
    const labels = { ...init.labels };
    const gpus = init.gpus.map((g) => ({ ...g }));
    const backends: ReadonlySet<string> = new Set(init.backends ?? []);
    const bundles: ReadonlyMap<string, string> = new Map(Object.entries(init.backendBundles ?? {}));
    if (existing !== undefined && existing.address === init.address && existing.bootEpoch === init.bootEpoch) {
      existing.labels = labels;
      existing.gpus = gpus;
      existing.version = version;
      existing.backends = backends;
      existing.bundles = bundles;
      this.loader?.bundlesChanged(init.nodeId);
      return existing;
    }
    const connector = this.o.connector;
    if (existing !== undefined) {
      existing.watchAbort?.abort();
      if (!existing.embedded && existing.address !== init.address) connector.close(existing.client);
    }
    const client = init.client ?? (existing !== undefined && existing.address === init.address ? existing.client : connector.connect(init.address, init.nodeId));
    const rec = registeredRecord(init, existing, this.o, { labels, gpus, version, backends, bundles, client });
    this.nodes.set(init.nodeId, rec);
    this.sorted = undefined;
    this.o.onNodeEvent(init.nodeId, "registered", labels);
    rec.watchAbort = new AbortController();
    connector.watchExits(rec.nodeId, client, rec.watchAbort.signal, (incarnation, exit) => {
      this.loader?.onBackendGone(incarnation, { exitCode: exit.exitCode, signal: exit.signal, intentional: exit.intentional, lastStderrLine: exit.lastStderrLine });
    });
    return rec;
  }

  /** {@link receive}, false when the node must register. */
  heartbeat(hb: HeartbeatReport): boolean {
    return this.receive(hb) !== "register";
  }

  /**
   * A heartbeat, full or delta, and what to answer. An older (boot epoch,
   * sequence) than the last one seen is ignored; a delta is applied only onto
   * the very inventory it is against (its base sequence, the same boot epoch)
   * and only when the result matches its digest — otherwise nothing changes
   * and the agent is asked for a full inventory. An empty delta on a settled
   * node skips the inventory reconcile (unchanged-heartbeat.ts).
   */
  receive(hb: HeartbeatReport): HeartbeatAnswer {
    const n = this.nodes.get(hb.nodeId);
    const order = heartbeatOrder(n === undefined ? undefined : { bootEpoch: n.bootEpoch, sequence: n.sequence, hasInventory: n.inventory !== undefined }, hb);
    if (n === undefined || order === "unknown" || order === "register-again") return "register";
    if (order === "stale") return "ok";
    // Checked whole before anything is applied: a refused heartbeat changes nothing.
    const far = sequenceOutOfBounds({ sequence: n.sequence, hasInventory: n.inventory !== undefined }, hb.sequence, this.o.clock.now() - n.lastHeartbeatMs);
    if (far !== undefined) throw invalidArgument("sequence", far);
    const field = hb.delta === undefined ? "backends" : "delta.upserts";
    const foreignAt = this.loader === undefined ? undefined : otherNodesIncarnation(this.loader, n.nodeId, hb.delta?.upserts ?? hb.backends);
    if (foreignAt !== undefined) throw permissionDenied(`${field}[${String(foreignAt.index)}].incarnation`, `"${foreignAt.incarnation}" runs on node "${foreignAt.owner}", not "${n.nodeId}": a node reports only its own instances`);
    const applied = hb.delta === undefined ? ({ t: "applied", reported: fullReported(hb.sequence, hb.backends) } as const) : applyInventoryDelta(n.reported, hb.sequence, hb.delta, this.o.maxInventory ?? 4096);
    if (applied.t === "mismatch") return "send-full";
    const reported = applied.reported;
    n.reported = reported;
    n.vouched = true;
    n.sequence = hb.sequence;
    n.lastHeartbeatMs = this.o.clock.now();
    n.heardMs = n.lastHeartbeatMs;
    n.lastHeartbeatWallMs = this.o.clock.wallNow();
    // Back (first inventory since it registered, or reachable again): its leftovers' stops are retried now.
    const returned = n.inventory === undefined || n.state !== "ready";
    this.transition(n, "heartbeat");
    const full = (): void => {
      this.applyInventory(n, hb, hb.delta === undefined ? hb.backends : Array.from(reported.entries.values(), (r) => r.entry), returned);
    };
    const loader = this.loader;
    if (loader === undefined || !this.unchanged(n, loader, hb, returned)) full();
    else if (this.o.checkUnchanged !== undefined) this.o.checkUnchanged(n.nodeId, full);
    else this.applyUnchanged(n, loader, hb, reported);
    return "ok";
  }

  /** Whether this applied heartbeat may skip the reconcile (unchanged-heartbeat.ts). O(1) but for the node's leftovers (none on that path). */
  private unchanged(n: NodeRecord<C>, loader: Loader, hb: HeartbeatReport, returned: boolean): boolean {
    if (this.o.skipUnchangedReconcile === false) return false;
    return unchangedHeartbeat({ delta: hb.delta, orphanCount: hb.orphans.length, mark: n.settled, wasReady: !returned, fenceCount: n.fences.size, heldStamp: loader.heldStamp(n.nodeId), leftoverCount: loader.leftoversOn(n.nodeId).length });
  }

  /**
   * The applied heartbeat's inventory, stored and reconciled whole with the
   * loader (adoptions, exits, missing counts, the journal's unconfirmed
   * instances, gone intents, orphans), then whether that left the node settled.
   */
  private applyInventory(n: NodeRecord<C>, hb: HeartbeatReport, backends: InventoryEntry[], returned: boolean): void {
    const loader = this.loader;
    n.inventory = unfencedInventory(n.fences, hb.sequence, backends, loader === undefined ? undefined : (inc) => loader.isGone(inc));
    this.applyReport(n, hb, loader);
    if (loader !== undefined) {
      const live = reconcileInventory(loader, { nodeId: n.nodeId, inventory: n.inventory, report: { bootEpoch: hb.bootEpoch, sequence: hb.sequence }, missing: n.missing, openIntent: this.openIntent, ...(this.o.onAdopted === undefined ? {} : { onAdopted: this.o.onAdopted }) });
      // Same turn: what the journal said ran here is now adopted or known not to run.
      loader.journalReplicas.nodeReported(n.nodeId, live);
      this.settleGoneIntents(n, loader, live);
    }
    if (returned) {
      loader?.retryLeftoversNow(n.nodeId);
      // Its first inventory since it registered (perhaps with a new catalog): bundleStale may answer otherwise now.
      loader?.bundlesChanged(n.nodeId);
    }
    this.trackOrphans(n, hb);
    // Orphans (live processes without a complete record) count toward the
    // node's limit, groups and memory; never selectable, never routed.
    loader?.setOrphans(n.nodeId, nodeOccupancy(loader, hb.orphans, n.inventory));
    n.settled = loader === undefined ? undefined : settledMark({ inventory: n.inventory, reportedCount: backends.length, orphanCount: hb.orphans.length, fenceCount: n.fences.size, missingCount: n.missing.size, held: loader.heldOn(n.nodeId), heldStamp: loader.heldStamp(n.nodeId), leftoverCount: loader.leftoversOn(n.nodeId).length });
  }

  /**
   * An unchanged heartbeat on a settled node: the stored inventory and the
   * reconcile's results stand (unchanged-heartbeat.ts says why); the report's
   * other parts apply, and what the loader or the outbox may have changed
   * since is settled as the reconcile would: the journal's unconfirmed
   * instances and open intents the loader no longer tracks, against the
   * inventory (every entry live). O(those), not O(the node's instances).
   */
  private applyUnchanged(n: NodeRecord<C>, loader: Loader, hb: HeartbeatReport, reported: ReportedInventory): void {
    this.applyReport(n, hb, loader);
    loader.journalReplicas.nodeReported(n.nodeId, reported.entries);
    this.settleGoneIntents(n, loader, reported.entries);
    this.trackOrphans(n, hb);
  }

  /** The heartbeat's orphans, foreign processes, artifact cache and resources. */
  private applyReport(n: NodeRecord<C>, hb: HeartbeatReport, loader: Loader | undefined): void {
    // What is unchanged is kept, not replaced by the heartbeat's copy: at thousands of nodes, a
    // copy kept per heartbeat outlives the young generation and is promoted, only to die in the
    // old one (scavenges copy it, the old space grows between major collections).
    if (hb.orphans.length !== 0 || n.orphans.length !== 0) n.orphans = hb.orphans;
    const foreign = hb.foreign ?? [];
    const fresh = freshForeign(n.foreign, foreign);
    if (foreign.length !== 0 || n.foreign.length !== 0) n.foreign = foreign;
    if (fresh.length > 0) this.o.onForeign?.(n.nodeId, fresh);
    if (hb.artifactCache !== undefined) n.artifactCache = artifactCacheOf(hb.artifactCache, n.artifactCache);
    if (hb.resources !== undefined) {
      const kept = n.resources;
      if (kept !== undefined && sameReadings(kept, hb.resources)) keepMeasuredAt(kept, hb.resources.measuredAt);
      else n.resources = hb.resources;
      // Every reading counts (its time is the node memory's latest reading), same figures or not.
      loader?.reportMemory(n.nodeId, memoryReading(hb.resources));
    }
  }

  private trackOrphans(n: NodeRecord<C>, hb: HeartbeatReport): void {
    const client = n.client;
    this.orphans.track(n.nodeId, hb.orphans, this.o.clock.now(), this.paused, (orphan) => this.o.connector.stopOrphan(client, orphan));
  }

  /** Counts this applied inventory against the node's open intents the loader no longer tracks; reports the twice-missing. */
  private settleGoneIntents(n: NodeRecord<C>, loader: Loader, live: Pick<ReadonlySet<string>, "has">): void {
    const { openIntentsOn, onIntentsGone } = this.o;
    if (openIntentsOn === undefined || onIntentsGone === undefined) return;
    const r = goneIntents(n.intentMisses, untracked(openIntentsOn(n.nodeId), loader), live);
    n.intentMisses = r.missing;
    if (r.gone.length > 0) onIntentsGone(n.nodeId, r.gone);
  }

  /**
   * A heartbeat of the node's current registration (same boot epoch) arrived
   * and waits for its turn: the node is not silent until that turn comes
   * ({@link released}), whatever the time its heartbeat is applied. Changes
   * nothing else (the heartbeat itself is fenced and applied as usual, or not
   * at all). O(1).
   */
  arrived(nodeId: string, bootEpoch: bigint): void {
    const n = this.nodes.get(nodeId);
    if (n === undefined || n.bootEpoch !== bootEpoch) return;
    n.heardMs = this.o.clock.now();
    n.heldHeartbeats++;
  }

  /**
   * The turn of a heartbeat {@link arrived} came (it is applied now, or its
   * stream ended while it waited): the node was heard until now, and its
   * silence counts from here unless another is held. Once per `arrived`. O(1).
   */
  released(nodeId: string, bootEpoch: bigint): void {
    const n = this.nodes.get(nodeId);
    if (n === undefined || n.bootEpoch !== bootEpoch || n.heldHeartbeats === 0) return;
    n.heardMs = this.o.clock.now();
    n.heldHeartbeats--;
  }

  /** Moves nodes whose heartbeats stopped (arrived, not applied: {@link arrived}) to unreachable, then lost. The owner calls it periodically. */
  checkHealth(): void {
    const now = this.o.clock.now();
    for (const n of this.nodes.values()) {
      if (!n.embedded && n.heldHeartbeats === 0 && now - n.heardMs > this.o.graceMs) this.transition(n, "silent");
    }
    const u = massUnreachability(this.nodes.values());
    if (u.paused !== this.paused) {
      this.paused = u.paused;
      this.o.onPauseChange?.(u.paused, u.unreachable, u.total);
    }
    if (u.paused) return;
    for (const n of this.nodes.values()) {
      if (n.embedded || n.state !== "unreachable") continue;
      // Seen unreachable for lost-after (which implies silent for grace + lost-after): a
      // coordinator that was paused or stalled must not declare its nodes lost on waking.
      if (now - (n.unreachableSinceMs ?? now) > (this.o.lostAfterMs ?? 600_000)) this.declareLost(n, false);
    }
  }

  /** True while unreachability-driven actions are paused. */
  get unreachabilityPaused(): boolean {
    return this.paused;
  }

  /**
   * Marks a node lost (by timeout or an operator's word): its models may be
   * placed elsewhere. Not subject to the mass-unreachability pause: only
   * checkHealth's timeout path is paused, an operator's word never is.
   */
  declareLost(n: NodeRecord<C>, byOperator: boolean, reason = ""): void {
    if (!this.transition(n, byOperator ? "operator" : "timeout", reason)) return;
    this.loader?.onNodeLost(n.nodeId);
  }

  /** Stops every exit watch and closes every client the connector made. */
  close(): void {
    for (const n of this.nodes.values()) {
      n.watchAbort?.abort();
      if (!n.embedded) this.o.connector.close(n.client);
    }
  }

  /** Applies `cause` to the node's health and announces the change; false when nothing changed. */
  private transition(n: NodeRecord<C>, cause: HealthCause, reason = ""): boolean {
    const to = nextHealth(n.state, cause);
    if (to === undefined) return false;
    n.state = to;
    n.unreachableSinceMs = to === "unreachable" ? this.o.clock.now() : undefined;
    if (cause === "operator" || cause === "timeout") this.o.onNodeEvent(n.nodeId, cause === "operator" ? "lost-by-operator" : "lost", n.labels, reason);
    else this.o.onNodeEvent(n.nodeId, to, n.labels);
    return true;
  }
}
