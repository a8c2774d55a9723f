import { BackendState, type AgentService, type GpuInfo, type InventoryEntry, type NodeResources, type OrphanProcess } from "@warden/proto";
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
  bootEpoch: bigint;
  sequence: bigint;
  lastHeartbeatMs: number;
  lastHeartbeatWallMs: number;
  state: NodeHealthState;
  draining: boolean;
  /** Last inventory; undefined until the first heartbeat. */
  inventory: InventoryEntry[] | undefined;
  orphans: OrphanProcess[];
  resources: NodeResources | undefined;
  client: Client<typeof AgentService>;
  port: AgentPort;
  /** Ready instances missing from consecutive inventories (vanished after two). */
  readonly missing: Map<string, number>;
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
  /** An orphan was first seen, is being stopped, was stopped, or its stop failed. */
  readonly onOrphan?: (nodeId: string, orphan: OrphanProcess, kind: "adopted" | "stopping" | "stopped" | "failed", detail: string) => void;
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
      const found = n.inventory.filter((e) => e.model === model && e.state !== BackendState.EXITED);
      if (found.length > 0 && n.state === "unreachable") return { t: "unknown", reason: `node "${n.nodeId}" is unreachable and its last inventory had "${model}"` };
      for (const e of found) hits.push({ nodeId: n.nodeId, address: e.address, incarnation: e.incarnation });
    }
    return hits.length > 0 ? { t: "found", hits } : { t: "absent" };
  }

  /** Registers (or re-registers) a node. */
  register(init: { nodeId: string; address: string; labels: Record<string, string>; gpus: GpuInfo[]; bootEpoch: bigint; embedded?: boolean; client?: Client<typeof AgentService>; version?: string }): NodeRecord {
    const existing = this.nodes.get(init.nodeId);
    const version = init.version ?? "";
    if (version !== wardenVersion && existing?.version !== version) {
      // Once per change, not per re-registration: mixed versions are allowed but worth knowing.
      this.o.log.warn("agent runs a different Warden version than the coordinator", { nodeId: init.nodeId, agentVersion: version === "" ? "unknown (before 0.2)" : version, coordinatorVersion: wardenVersion });
    }
    if (existing === undefined && this.nodes.size >= NodeRegistry.maxNodes) throw new Error(`too many nodes (cap ${String(NodeRegistry.maxNodes)})`);
    if (existing !== undefined && existing.address === init.address && existing.bootEpoch === init.bootEpoch) {
      existing.labels = init.labels;
      existing.gpus = init.gpus;
      existing.version = version;
      return existing;
    }
    if (existing !== undefined) {
      existing.watchAbort?.abort();
      if (!existing.embedded && existing.address !== init.address) existing.client.close();
    }
    const client = init.client ?? (existing !== undefined && existing.address === init.address ? existing.client : this.o.connect(init.address));
    const rec: NodeRecord = {
      nodeId: init.nodeId,
      address: init.address,
      labels: init.labels,
      gpus: init.gpus,
      embedded: init.embedded ?? false,
      version,
      bootEpoch: init.bootEpoch,
      sequence: 0n,
      lastHeartbeatMs: this.o.clock.now(),
      lastHeartbeatWallMs: this.o.clock.wallNow(),
      state: "ready",
      draining: existing?.draining ?? false,
      inventory: existing?.bootEpoch === init.bootEpoch ? existing.inventory : undefined,
      orphans: [],
      resources: existing?.resources,
      client,
      port: agentPort(client),
      missing: new Map(),
      watchAbort: undefined,
    };
    this.nodes.set(init.nodeId, rec);
    this.sorted = undefined;
    this.o.onNodeEvent(init.nodeId, "registered", init.labels);
    this.watchExits(rec);
    return rec;
  }

  /**
   * A heartbeat. Returns false when the node is unknown (it must register).
   * An older (boot epoch, sequence) than the last one seen is ignored.
   */
  heartbeat(hb: { nodeId: string; bootEpoch: bigint; sequence: bigint; backends: InventoryEntry[]; orphans: OrphanProcess[]; resources: NodeResources | undefined }): boolean {
    const n = this.nodes.get(hb.nodeId);
    if (n === undefined || hb.bootEpoch < n.bootEpoch) return n !== undefined;
    if (hb.bootEpoch > n.bootEpoch) return false; // the agent restarted: register again first
    if (hb.sequence < n.sequence || (hb.sequence === n.sequence && n.inventory !== undefined)) return true;
    n.sequence = hb.sequence;
    n.lastHeartbeatMs = this.o.clock.now();
    n.lastHeartbeatWallMs = this.o.clock.wallNow();
    if (n.state !== "ready") {
      n.state = "ready";
      this.o.onNodeEvent(n.nodeId, "ready", n.labels);
    }
    n.inventory = hb.backends;
    n.orphans = hb.orphans;
    if (hb.resources !== undefined) {
      n.resources = hb.resources;
      this.loader?.reportMemory(n.nodeId, memoryReading(hb.resources));
    }
    this.reconcile(n);
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
      if (e.stopRequested !== undefined || this.openIntent(e.incarnation) || spec === undefined) {
        loader.adoptLeftover({ incarnation: e.incarnation, nodeId: n.nodeId, model: e.model, address: e.address, lastError: "adopted from inventory with a stop requested" });
        this.o.log.info("adopted instance as leftover", { nodeId: n.nodeId, model: e.model, incarnation: e.incarnation });
      } else {
        loader.adoptRemoteOnly(spec, n.nodeId, e.address, e.incarnation);
        this.o.log.info("adopted instance as remote-only", { nodeId: n.nodeId, model: e.model, incarnation: e.incarnation });
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
   * Orphans are accounted from the first heartbeat that shows them (an
   * `orphan.adopted` event) and stopped once they outlive the grace, through
   * the agent's StopOrphan (which re-checks the pid itself).
   */
  private trackOrphans(n: NodeRecord, orphans: readonly OrphanProcess[]): void {
    const now = this.o.clock.now();
    let seen = this.orphanSeen.get(n.nodeId);
    if (seen === undefined) {
      seen = new Map();
      this.orphanSeen.set(n.nodeId, seen);
    }
    const present = new Set<string>();
    for (const o of orphans) {
      const key = `${String(o.pid)}@${o.address}`;
      present.add(key);
      const first = seen.get(key);
      if (first === undefined) {
        seen.set(key, now);
        this.o.onOrphan?.(n.nodeId, o, "adopted", o.detail);
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
    for (const key of [...seen.keys()]) {
      if (!present.has(key)) {
        seen.delete(key);
        this.orphanStops.delete(`${n.nodeId}/${key}`);
      }
    }
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
