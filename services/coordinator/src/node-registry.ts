import { BackendState, type AgentService, type ForeignProcess, type GpuInfo, type InventoryEntry, type NodeResources, type OrphanProcess } from "@warden/proto";
import type { Client } from "@warden/grpc";
import { isUlid, wardenVersion, type Clock, type Logger } from "@warden/common";
import type { AgentDirectory, AgentPort, InventoryAnswer, InventoryHit, InventoryPort, Loader } from "@warden/loader";
import type { MemoryReading } from "@warden/watchdog";
import { agentPort } from "./agent-port.js";

export type NodeHealthState = "ready" | "unreachable" | "lost";

/** One registered node as the coordinator knows it. */
export interface NodeRecord {
  readonly nodeId: string;
  address: string;
  labels: Record<string, string>;
  gpus: GpuInfo[];
  readonly embedded: boolean;
  /** Warden version the agent registered with ("" from agents before 0.2). */
  version: string;
  /**
   * Catalog backend names the agent registered with (≤ 256, validated). Empty
   * from an agent older than RegisterRequest.backends: placement then takes
   * the node as able to start any backend, as before.
   */
  backends: ReadonlySet<string>;
  bootEpoch: bigint;
  sequence: bigint;
  lastHeartbeatMs: number;
  lastHeartbeatWallMs: number;
  state: NodeHealthState;
  draining: boolean;
  /** Last inventory; undefined until the first heartbeat. */
  inventory: InventoryEntry[] | undefined;
  orphans: OrphanProcess[];
  /** Listeners in the agent's port range it did not start (last heartbeat); never signalled. */
  foreign: ForeignProcess[];
  resources: NodeResources | undefined;
  client: Client<typeof AgentService>;
  port: AgentPort;
  /** Ready instances missing from consecutive inventories (vanished after two). */
  readonly missing: Map<string, number>;
  /**
   * Incarnations confirmed gone → this boot epoch's sequence last seen at the
   * confirmation. A heartbeat up to one past it may carry an inventory taken
   * before the stop took effect (the one in flight then), so it cannot show
   * them; the first heartbeat beyond releases the fence. Dropped with the boot
   * epoch (older epochs' heartbeats are refused). Capped per node, oldest out.
   */
  readonly fences: Map<string, bigint>;
  watchAbort: AbortController | undefined;
}

export interface NodeRegistryOptions {
  readonly clock: Clock;
  readonly log: Logger;
  /** Heartbeats older than this make a node unreachable. @default 5000 */
  readonly graceMs: number;
  /** Unreachable this long → lost. @default 10 min */
  readonly lostAfterMs?: number;
  /** Makes a gRPC client for a registered agent's address. */
  readonly connect: (address: string) => Client<typeof AgentService>;
  /** `reason` is the operator's free text for "lost-by-operator", empty otherwise. */
  readonly onNodeEvent: (nodeId: string, kind: "registered" | "unreachable" | "lost" | "lost-by-operator" | "ready", labels: Record<string, string>, reason?: string) => void;
  /**
   * Open stop intents on `nodeId` whose incarnation its inventory no longer
   * has: the process is gone (stopped late, or exited), so the intent is done.
   */
  readonly onIntentsGone?: (nodeId: string, present: ReadonlySet<string>) => void;
  /** Orphans older than this are stopped (reason orphan). @default 2 min */
  readonly orphanGraceMs?: number;
  /**
   * Orphans first seen in one heartbeat, in report order (never empty): one
   * call per node per heartbeat, so a peer reporting many orphans makes one
   * coalesced `orphan.adopted` event, not one each.
   */
  readonly onOrphansAdopted?: (nodeId: string, adopted: readonly OrphanProcess[]) => void;
  /** An orphan is being stopped, was stopped, or its stop failed. */
  readonly onOrphan?: (nodeId: string, orphan: OrphanProcess, kind: "stopping" | "stopped" | "failed", detail: string) => void;
  /**
   * A heartbeat showed foreign processes the node's previous one did not:
   * called once per such heartbeat with the new ones (coalesced, never one
   * call per process).
   */
  readonly onForeign?: (nodeId: string, fresh: readonly ForeignProcess[]) => void;
  /** Mass unreachability began or ended. */
  readonly onPauseChange?: (paused: boolean, unreachable: number, total: number) => void;
}

/**
 * Registered agents: registration, heartbeats ((boot epoch, sequence) ordered,
 * older ignored), health states, and reconciliation of each inventory with the
 * loader — unknown valid incarnations adopted (remote-only, or leftover when a
 * stop was requested or a stop intent is open), exited or twice-missing
 * instances removed through the watchdog. Also the loader's AgentDirectory
 * and InventoryPort.
 */
export class NodeRegistry implements AgentDirectory, InventoryPort {
  private readonly nodes = new Map<string, NodeRecord>();
  private paused = false;
  private sorted: readonly NodeRecord[] | undefined;
  /** node → "pid@address" → first seen (monotonic ms); bounded by the orphans nodes report. */
  private readonly orphanSeen = new Map<string, Map<string, number>>();
  private readonly orphanStops = new Set<string>();
  private loader: Loader | undefined;
  private openIntent: (incarnation: string) => boolean = () => false;
  /** Cap on registered nodes (client-keyed). */
  static readonly maxNodes = 4096;
  /** Cap on open fences per node (confirmed stops within about one heartbeat). */
  static readonly maxFencesPerNode = 4096;

  constructor(private readonly o: NodeRegistryOptions) {}

  attach(loader: Loader, openIntent: (incarnation: string) => boolean): void {
    this.loader = loader;
    this.openIntent = openIntent;
  }

  /** Nodes by id; cached between registrations (placement asks on every load). */
  list(): readonly NodeRecord[] {
    this.sorted ??= [...this.nodes.values()].sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
    return this.sorted;
  }

  get(nodeId: string): NodeRecord | undefined {
    return this.nodes.get(nodeId);
  }

  // AgentDirectory
  agent(nodeId: string): AgentPort | undefined {
    const n = this.nodes.get(nodeId);
    return n === undefined || n.state === "lost" ? undefined : n.port;
  }

  isLocal(nodeId: string): boolean {
    return this.nodes.get(nodeId)?.embedded === true;
  }

  isReachable(nodeId: string): boolean {
    return this.nodes.get(nodeId)?.state === "ready";
  }

  // InventoryPort
  findModel(model: string): InventoryAnswer {
    const hits: InventoryHit[] = [];
    for (const n of this.nodes.values()) {
      if (n.state === "lost") continue;
      if (n.inventory === undefined) return { t: "unknown", reason: `node "${n.nodeId}" has not reported an inventory yet` };
      const found = n.inventory.filter((e) => e.model === model && e.state !== BackendState.EXITED && this.loader?.isGone(e.incarnation) !== true);
      if (found.length > 0 && n.state === "unreachable") return { t: "unknown", reason: `node "${n.nodeId}" is unreachable and its last inventory had "${model}"` };
      for (const e of found) hits.push({ nodeId: n.nodeId, address: e.address, incarnation: e.incarnation });
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
    n.fences.delete(incarnation);
    n.fences.set(incarnation, n.sequence);
    if (n.fences.size > NodeRegistry.maxFencesPerNode) {
      const oldest = n.fences.keys().next().value;
      if (oldest !== undefined) n.fences.delete(oldest);
    }
    if (n.inventory?.some((e) => e.incarnation === incarnation) === true) n.inventory = n.inventory.filter((e) => e.incarnation !== incarnation);
    n.missing.delete(incarnation);
  }

  /** Registers (or re-registers) a node. */
  register(init: { nodeId: string; address: string; labels: Record<string, string>; gpus: GpuInfo[]; bootEpoch: bigint; embedded?: boolean; client?: Client<typeof AgentService>; version?: string; backends?: readonly string[] }): NodeRecord {
    const existing = this.nodes.get(init.nodeId);
    const version = init.version ?? "";
    if (version !== wardenVersion && existing?.version !== version) {
      // Once per change, not per re-registration: mixed versions are allowed but worth knowing.
      this.o.log.warn("agent runs a different Warden version than the coordinator", { nodeId: init.nodeId, agentVersion: version === "" ? "unknown (before 0.2)" : version, coordinatorVersion: wardenVersion });
    }
    if (existing === undefined && this.nodes.size >= NodeRegistry.maxNodes) throw new Error(`too many nodes (cap ${String(NodeRegistry.maxNodes)})`);
    // Copies: the record must not share objects with a request (validated by
    // NodeService against node-report-limits before it gets here).
    const labels = { ...init.labels };
    const gpus = init.gpus.map((g) => ({ ...g }));
    const backends: ReadonlySet<string> = new Set(init.backends ?? []);
    if (existing !== undefined && existing.address === init.address && existing.bootEpoch === init.bootEpoch) {
      existing.labels = labels;
      existing.gpus = gpus;
      existing.version = version;
      existing.backends = backends;
      return existing;
    }
    if (existing !== undefined) {
      existing.watchAbort?.abort();
      if (!existing.embedded && existing.address !== init.address) existing.client.close();
    }
    const client = init.client ?? (existing !== undefined && existing.address === init.address ? existing.client : this.o.connect(init.address));
    // Same boot epoch (a new address): the agent's sequence goes on, so the last
    // one seen and the fences stay — a reset would let an older heartbeat in.
    const sameBoot = existing?.bootEpoch === init.bootEpoch;
    const rec: NodeRecord = {
      nodeId: init.nodeId,
      address: init.address,
      labels,
      gpus,
      embedded: init.embedded ?? false,
      version,
      backends,
      bootEpoch: init.bootEpoch,
      sequence: sameBoot ? existing.sequence : 0n,
      lastHeartbeatMs: this.o.clock.now(),
      lastHeartbeatWallMs: this.o.clock.wallNow(),
      state: "ready",
      draining: existing?.draining ?? false,
      inventory: sameBoot ? existing.inventory : undefined,
      orphans: [],
      foreign: existing?.bootEpoch === init.bootEpoch ? existing.foreign : [],
      resources: existing?.resources,
      client,
      port: agentPort(client),
      missing: new Map(),
      fences: sameBoot ? existing.fences : new Map<string, bigint>(),
      watchAbort: undefined,
    };
    this.nodes.set(init.nodeId, rec);
    this.sorted = undefined;
    this.o.onNodeEvent(init.nodeId, "registered", labels);
    this.watchExits(rec);
    return rec;
  }

  /**
   * A heartbeat. Returns false when the node is unknown (it must register).
   * An older (boot epoch, sequence) than the last one seen is ignored.
   */
  heartbeat(hb: { nodeId: string; bootEpoch: bigint; sequence: bigint; backends: InventoryEntry[]; orphans: OrphanProcess[]; foreign?: ForeignProcess[]; resources: NodeResources | undefined }): boolean {
    const n = this.nodes.get(hb.nodeId);
    if (n === undefined || hb.bootEpoch < n.bootEpoch) return n !== undefined;
    if (hb.bootEpoch > n.bootEpoch) return false; // the agent restarted: register again first
    if (hb.sequence < n.sequence || (hb.sequence === n.sequence && n.inventory !== undefined)) return true;
    n.sequence = hb.sequence;
    n.lastHeartbeatMs = this.o.clock.now();
    n.lastHeartbeatWallMs = this.o.clock.wallNow();
    // Back (first inventory since it registered, or reachable again): its leftovers' stops are retried now.
    const returned = n.inventory === undefined || n.state !== "ready";
    if (n.state !== "ready") {
      n.state = "ready";
      this.o.onNodeEvent(n.nodeId, "ready", n.labels);
    }
    n.inventory = this.unfenced(n, hb.sequence, hb.backends);
    n.orphans = hb.orphans;
    this.noteForeign(n, hb.foreign ?? []);
    if (hb.resources !== undefined) {
      n.resources = hb.resources;
      this.loader?.reportMemory(n.nodeId, memoryReading(hb.resources));
    }
    this.reconcile(n);
    if (returned) this.loader?.retryLeftoversNow(n.nodeId);
    this.trackOrphans(n, hb.orphans);
    // Orphans (live processes without a complete record) count toward the
    // node's limit, groups and memory; never selectable, never routed.
    this.loader?.setOrphans(
      n.nodeId,
      hb.orphans.map((o) => {
        const spec = o.model === "" ? undefined : this.loader?.modelSpec(o.model);
        return { kind: "orphan" as const, key: `pid:${String(o.pid)}`, model: o.model === "" ? undefined : o.model, groups: spec?.groups ?? [], sizeBytes: Number(o.memoryBytes) };
      }),
    );
    return true;
  }

  /** Moves nodes whose heartbeats stopped to unreachable, then lost. Call periodically. */
  checkHealth(): void {
    const now = this.o.clock.now();
    for (const n of this.nodes.values()) {
      if (n.embedded) continue;
      const silentMs = now - n.lastHeartbeatMs;
      if (n.state === "ready" && silentMs > this.o.graceMs) {
        n.state = "unreachable";
        this.o.onNodeEvent(n.nodeId, "unreachable", n.labels);
      }
    }
    // When most nodes (≥ 55 %, at least 3) are unreachable at once, the fault is
    // more likely ours (network, coordinator host) than theirs: actions driven by
    // unreachability (declaring nodes lost and placing their models elsewhere) pause.
    const all = [...this.nodes.values()].filter((n) => !n.embedded && n.state !== "lost");
    const unreachable = all.filter((n) => n.state === "unreachable").length;
    const paused = unreachable >= 3 && unreachable >= 0.55 * all.length;
    if (paused !== this.paused) {
      this.paused = paused;
      this.o.onPauseChange?.(paused, unreachable, all.length);
    }
    if (paused) return;
    for (const n of this.nodes.values()) {
      if (n.embedded || n.state !== "unreachable") continue;
      if (now - n.lastHeartbeatMs > this.o.graceMs + (this.o.lostAfterMs ?? 600_000)) this.declareLost(n, false);
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
  declareLost(n: NodeRecord, byOperator: boolean, reason = ""): void {
    if (n.state === "lost") return;
    n.state = "lost";
    this.o.onNodeEvent(n.nodeId, byOperator ? "lost-by-operator" : "lost", n.labels, reason);
    this.loader?.onNodeLost(n.nodeId);
  }

  /**
   * The inventory without what is known gone: fenced incarnations while this
   * heartbeat may predate their confirmation (sequence ≤ fence + 1), and any
   * the loader remembers gone. Fences this heartbeat is beyond are released.
   */
  private unfenced(n: NodeRecord, sequence: bigint, backends: InventoryEntry[]): InventoryEntry[] {
    for (const [inc, at] of n.fences) if (sequence > at + 1n) n.fences.delete(inc);
    const loader = this.loader;
    if (n.fences.size === 0 && loader === undefined) return backends;
    let out: InventoryEntry[] | undefined;
    for (const [i, e] of backends.entries()) {
      const drop = n.fences.has(e.incarnation) || loader?.isGone(e.incarnation) === true;
      if (drop && out === undefined) out = backends.slice(0, i);
      else if (!drop && out !== undefined) out.push(e);
    }
    return out ?? backends;
  }

  private reconcile(n: NodeRecord): void {
    const loader = this.loader;
    if (loader === undefined || n.inventory === undefined) return;
    const seen = new Set<string>();
    for (const e of n.inventory) {
      seen.add(e.incarnation);
      if (e.state === BackendState.EXITED) {
        loader.onBackendGone(e.incarnation, { exitCode: undefined, signal: "", intentional: e.stopRequested !== undefined, lastStderrLine: "" });
        continue;
      }
      if (loader.knows(e.incarnation) || !isUlid(e.incarnation)) continue;
      if (e.state !== BackendState.READY && e.stopRequested === undefined) continue; // a start in progress elsewhere settles itself
      const spec = loader.modelSpec(e.model);
      // The loader publishes instance.adopted for each adoption it commits.
      const foundBy = e.stopRequested !== undefined ? "stop-requested" : this.openIntent(e.incarnation) ? "open-stop-intent" : spec === undefined ? "unconfigured" : undefined;
      if (foundBy === undefined && spec !== undefined) {
        if (loader.adoptRemoteOnly(spec, n.nodeId, e.address, e.incarnation, "inventory")) this.o.log.info("adopted instance as remote-only", { nodeId: n.nodeId, model: e.model, incarnation: e.incarnation });
      } else {
        const lastError = foundBy === "unconfigured" ? "adopted from inventory: model not configured" : "adopted from inventory with a stop requested";
        if (loader.adoptLeftover({ incarnation: e.incarnation, nodeId: n.nodeId, model: e.model, address: e.address, lastError, foundBy: foundBy ?? "unconfigured" })) {
          this.o.log.info("adopted instance as leftover", { nodeId: n.nodeId, model: e.model, incarnation: e.incarnation, foundBy });
        }
      }
    }
    // Ready instances the loader holds on this node but the inventory lacks:
    // gone after two consecutive inventories (one may race a start).
    for (const h of loader.heldInstances()) {
      if (h.nodeId !== n.nodeId || h.phase !== "ready") continue;
      if (seen.has(h.incarnation)) {
        n.missing.delete(h.incarnation);
        continue;
      }
      const count = (n.missing.get(h.incarnation) ?? 0) + 1;
      n.missing.set(h.incarnation, count);
      if (count >= 2) {
        n.missing.delete(h.incarnation);
        loader.onBackendGone(h.incarnation, { exitCode: undefined, signal: "", intentional: false, lastStderrLine: "vanished from the agent's inventory" });
      }
    }
    for (const l of loader.leftoverList()) {
      if (l.nodeId === n.nodeId && !seen.has(l.incarnation)) loader.onBackendGone(l.incarnation, { exitCode: undefined, signal: "", intentional: true, lastStderrLine: "" });
    }
    const live = new Set(n.inventory.filter((e) => e.state !== BackendState.EXITED).map((e) => e.incarnation));
    this.o.onIntentsGone?.(n.nodeId, live);
  }

  /**
   * Orphans are accounted from the first heartbeat that shows them (one
   * coalesced `orphan.adopted` event per heartbeat for all new ones) and
   * stopped once they outlive the grace, through the agent's StopOrphan
   * (which re-checks the pid itself). `orphans` is bounded by NodeService
   * (nodeReportLimits.maxOrphans), and so is `orphanSeen`.
   */
  private trackOrphans(n: NodeRecord, orphans: readonly OrphanProcess[]): void {
    const now = this.o.clock.now();
    let seen = this.orphanSeen.get(n.nodeId);
    if (seen === undefined) {
      seen = new Map();
      this.orphanSeen.set(n.nodeId, seen);
    }
    const present = new Set<string>();
    const adopted: OrphanProcess[] = [];
    for (const o of orphans) {
      const key = `${String(o.pid)}@${o.address}`;
      if (present.has(key)) continue; // listed twice in one report: one orphan
      present.add(key);
      const first = seen.get(key);
      if (first === undefined) {
        seen.set(key, now);
        adopted.push(o);
        continue;
      }
      const stopKey = `${n.nodeId}/${key}`;
      if (now - first < (this.o.orphanGraceMs ?? 120_000) || this.orphanStops.has(stopKey) || this.paused) continue;
      this.orphanStops.add(stopKey);
      this.o.onOrphan?.(n.nodeId, o, "stopping", "");
      n.client.stopOrphan({ pid: o.pid, address: o.address, force: false, reason: "orphan" }, { timeoutMs: 30_000 }).then(
        (r) => {
          this.o.onOrphan?.(n.nodeId, o, "stopped", r.outcome.case === "alreadyGone" ? "already gone" : "");
        },
        (err: unknown) => {
          this.orphanStops.delete(stopKey); // retried on a later heartbeat
          this.o.onOrphan?.(n.nodeId, o, "failed", err instanceof Error ? err.message : String(err));
        },
      );
    }
    if (adopted.length > 0) this.o.onOrphansAdopted?.(n.nodeId, adopted);
    for (const key of [...seen.keys()]) {
      if (!present.has(key)) {
        seen.delete(key);
        this.orphanStops.delete(`${n.nodeId}/${key}`);
      }
    }
  }

  /** Keeps the node's foreign list; reports the ones its previous heartbeat did not show. */
  private noteForeign(n: NodeRecord, foreign: ForeignProcess[]): void {
    const key = (f: ForeignProcess): string => `${String(f.pid)}@${f.address}`;
    const before = new Set(n.foreign.map(key));
    n.foreign = foreign;
    const fresh = foreign.filter((f) => !before.has(key(f)));
    if (fresh.length > 0) this.o.onForeign?.(n.nodeId, fresh);
  }

  /** Follows the agent's WatchBackends so an exit is seen at once, not at the next heartbeat. */
  private watchExits(n: NodeRecord): void {
    const ctl = new AbortController();
    n.watchAbort = ctl;
    void (async () => {
      try {
        for await (const ev of n.client.watchBackends({}, { signal: ctl.signal })) {
          if (ev.event.case === "exited") {
            const x = ev.event.value;
            this.loader?.onBackendGone(ev.incarnation, { exitCode: x.exitCode, signal: x.signal, intentional: x.intentional, lastStderrLine: x.lastStderrLine });
          }
        }
      } catch (err) {
        if (!ctl.signal.aborted) this.o.log.debug("WatchBackends ended", { nodeId: n.nodeId, err: err instanceof Error ? err.message : String(err) });
      }
      // Heartbeats remain the source of truth; the watch is only for promptness.
      if (!ctl.signal.aborted && this.nodes.get(n.nodeId) === n) {
        const retry = this.o.clock.setTimer(2_000, () => {
          if (this.nodes.get(n.nodeId) === n && !ctl.signal.aborted) this.watchExits(n);
        });
        ctl.signal.addEventListener("abort", retry, { once: true });
      }
    })();
  }

  close(): void {
    for (const n of this.nodes.values()) {
      n.watchAbort?.abort();
      if (!n.embedded) n.client.close();
    }
  }
}

/** Heartbeat resources → the watchdog's memory reading (GPUs, else RAM). */
export function memoryReading(r: NodeResources): MemoryReading {
  return {
    gpus: r.gpus.map((g) => ({ index: g.index, totalBytes: Number(g.totalBytes), usedBytes: Number(g.usedBytes) })),
    ...(r.ramTotalBytes > 0n ? { ram: { totalBytes: Number(r.ramTotalBytes), usedBytes: Number(r.ramUsedBytes) } } : {}),
  };
}
