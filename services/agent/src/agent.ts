import { randomInt } from "node:crypto";
import { ArtifactCache } from "./artifact-cache.js";
import { BundleInstaller } from "./backend-bundle.js";
import { BundleReport, registryLayers, type ImageLayerLister } from "./bundle-report.js";
import type { StoreReader } from "./artifact-sources.js";
import type { PeerClients } from "./peer-source.js";
import type { RegistryLoginLookup } from "./registry-auth.js";
import type { PeerFinder } from "./peer-finder.js";
import type { ArtifactCacheSnapshot } from "./node-heartbeat.js";
import { setMaxListeners } from "node:events";
import { join } from "node:path";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, nullLogger, systemClock, type Clock, type Logger } from "@warden/common";
import { createClient, type ServiceImpl } from "@warden/grpc";
import { Backend, type AgentService } from "@warden/proto";
import type { AgentConfig } from "./agent-config.js";
import { recordOf, type AgentContext } from "./agent-context.js";
import { adoptFromStateDir, type AdoptionReport } from "./adoption.js";
import { createAgentService } from "./agent-service.js";
import type { BackendPhase, BackendProcess } from "./backend-process.js";
import { BackendTable } from "./backend-table.js";
import { HealthMonitor } from "./health-monitor.js";
import { backendClientTls } from "./backend-client-tls.js";
import { measureNodeResources, takeInventory, type InventorySnapshot, type NodeResourcesInit } from "./inventory.js";
import { createMemoryProbe } from "./memory-probe.js";
import { EvictionOutbox } from "./eviction-outbox.js";
import { ReportOutbox, bundleInstallReportBounds, pullReportBounds } from "./report-outbox.js";
import type { PullRecord } from "./artifact-cache.js";
import type { StartInstallRecord } from "./backend-bundle.js";
import { liveCacheDigests } from "./live-cache-digests.js";
import { LeaderFence } from "./leader-fence-store.js";
import { ModelLocks } from "./model-lock.js";
import type { Foreign, Orphan } from "./orphan-scan.js";
import { PortAllocator } from "./port-allocator.js";
import { PortRangeScan } from "./port-range-scan.js";
import { agentMarkOf } from "./process-mark.js";
import { backendAuthOf } from "./backend-auth.js";
import type { WatchEventInit } from "./proto-views.js";
import { RecordStore } from "./record-store.js";
import { StartRegistry } from "./start-registry.js";
import { WatchHub } from "./watch-hub.js";
import { ReportSequence } from "./report-sequence.js";
import { PendingSpawns } from "./pending-spawns.js";

// The agent's parts live in files named after their rule: start-backend.ts
// (spawn, readiness, LoadModel), stop-backend.ts, adoption.ts (records at
// start), port-range-scan.ts (orphans, foreign, StopOrphan), inventory.ts and
// agent-service.ts (the gRPC surface). This file wires them and owns the
// agent's lifecycle (start, close).
export type { AdoptionReport } from "./adoption.js";
export type { InventorySnapshot, NodeResourcesInit } from "./inventory.js";
export { budgetBeforeCallerDeadlineMs } from "./caller-deadline.js";

/** Injected ports; all optional. */
export interface AgentDeps {
  /** @default systemClock */
  clock?: Clock;
  /** @default nullLogger */
  logger?: Logger;
  /** Environment the catalog's allow-list draws from. @default process.env */
  env?: Readonly<Record<string, string | undefined>>;
  /** @default "/proc" (tests point it elsewhere only for pure parsing) */
  procRoot?: string;
  /** The backend port the first search starts at. @default by the config's ports.start (see PortAllocatorOptions.startAt) */
  portStartAt?: number;
  /** Reads the coordinators' artifact store (`store:` sources; artifact-store-client.ts); undefined = none. */
  storeReader?: StoreReader;
  /** Test seam: free bytes of the artifact cache's file system (statfs by default). */
  artifactFreeBytes?: (dir: string) => Promise<number>;
  /** Clients for other agents' PeerArtifactService (peer-source.ts); undefined = peers a start names are ignored. */
  peerClients?: PeerClients;
  /** Credentials of private OCI registries for artifact and bundle pulls (main.ts reads registryAuthFile; SIGHUP swaps them). @default anonymous */
  registryLogin?: RegistryLoginLookup;
  /** Test seam: reads a bundle image's layers for the heartbeat's sizes. @default the registry's manifest (bundle-report.ts) */
  bundleLayers?: ImageLayerLister;
  /** Asks the coordinator for peers of a bundle's layers or tarball (peer-finder.ts); undefined = bundles from their origin only. */
  findPeers?: PeerFinder;
}

/** The agent a coordinator embeds or main.ts serves. */
export interface Agent {
  readonly config: AgentConfig;
  /** ms since the Unix epoch when this agent instance was created (its boot epoch). */
  readonly bootEpochMs: number;
  /** AgentService handlers; callable in process (see `inProcessContext`) or served by a GrpcServer. */
  readonly service: ServiceImpl<typeof AgentService>;
  /** Prepares the state dir and adopts backends from its records. Call once before serving. */
  start(): Promise<AdoptionReport>;
  /**
   * Stops accepting starts and cancels the ones in flight (their processes are
   * stopped). With `stopBackends`, calls Free on each backend (capped, errors and
   * UNIMPLEMENTED ignored) and then stops it gracefully; without, leaves them
   * running for the next agent to adopt.
   */
  close(options: { stopBackends: boolean }): Promise<void>;
  /**
   * Ends every WatchBackends stream now with UNAVAILABLE "agent shutting down"
   * (the coordinator re-opens it on the agent's successor). Called before the
   * gRPC server drains: a watch never ends by itself, so the drain otherwise
   * waited out its whole grace on the coordinator's stream.
   */
  endWatches(): void;
  /** The artifact cache (undefined without a modelsPath): what PeerArtifactService serves from (peer-upload.ts). */
  readonly artifacts: ArtifactCache | undefined;
  inventory(signal?: AbortSignal): Promise<InventorySnapshot>;
  nodeResources(signal?: AbortSignal): Promise<NodeResourcesInit>;
  /** Stamps the next Heartbeat report (report-sequence.ts); call it before reading the inventory the report carries. */
  nextReportSequence(): bigint;
  /** Rescans the port range for orphans and foreign processes now (also done every orphanScanIntervalMs); returns the orphans. */
  rescanOrphans(): Promise<Orphan[]>;
  /** Foreign processes of the last scan. */
  foreign(): readonly Foreign[];
  /** The newest leader epoch a command brought (0 = none; leader-fence.ts). */
  leaderEpoch(): bigint;
  /** Raises the fence to the epoch the followed HA leader announced (never lowers it; leader-fence-store.ts). */
  raiseLeaderEpoch(epoch: bigint): Promise<void>;
  /** The artifact cache's state for the heartbeat; undefined without a modelsPath or when it cannot be read now. */
  artifactCache(): Promise<ArtifactCacheSnapshot | undefined>;
  /** Audit records dropped unreported (more waited than the outbox keeps while no coordinator acknowledged): completed pulls, bundle installs by starts. */
  auditDropped(): { pulls: number; bundleInstalls: number };
  /** Live (not exited) backends by incarnation: pid, address, state. For tests and the CLI. */
  processes(): { incarnation: string; model: string; pid: number; address: string; state: BackendPhase["t"] }[];
}

/**
 * Creates the agent: the node's process table behind AgentService. See
 * services/agent/README.md for the contract of each RPC.
 */
export function createAgent(config: AgentConfig, deps: AgentDeps = {}): Agent {
  const clock = deps.clock ?? systemClock;
  const logger = (deps.logger ?? nullLogger).child({ component: "agent", nodeId: config.nodeId });
  const procRoot = deps.procRoot ?? "/proc";
  const bootEpochMs = Math.floor(clock.wallNow());
  const records = new RecordStore(config.stateDir);
  const mark = agentMarkOf(config.nodeId, config.stateDir);
  const table = new BackendTable(clock);
  const closing = new AbortController();
  // The agent's lifetime signal is shared by every operation in flight (each
  // removes its listener when done); many at once is normal, not a leak.
  setMaxListeners(0, closing.signal);
  const watchesEnd = new AbortController();
  setMaxListeners(0, watchesEnd.signal);
  const fence = new LeaderFence(config.stateDir);
  const scan = new PortRangeScan({ config, clock, logger, mark, procRoot, table, fence, closing: closing.signal });
  const ports = new PortAllocator({ host: config.backendHost, min: config.portMin, max: config.portMax, quarantineMs: config.portQuarantineMs, clock, blocked: (p) => scan.holdsPort(p), startAt: deps.portStartAt ?? (config.portStart === "random" ? config.portMin + randomInt(config.portMax - config.portMin + 1) : config.portMin) });
  const hub = new WatchHub<WatchEventInit>();
  const reports = new ReportSequence();
  let started = false;

  const watchEvent = (p: BackendProcess, event: WatchEventInit["event"]): void => {
    hub.publish({ incarnation: p.id.incarnation, model: p.id.model, address: p.id.address, at: timestampFromMs(clock.wallNow()), event });
  };

  const onTransition = (p: BackendProcess, _from: BackendPhase, to: BackendPhase): void => {
    switch (to.t) {
      case "ready":
        watchEvent(p, { case: "ready", value: { memoryBytes: BigInt(to.memoryBytes) } });
        break;
      case "exited":
        table.noteExited(p.id.incarnation);
        // The process is gone: its record, port and log files go with it.
        records.remove(p.id.incarnation).catch((err: unknown) => {
          logger.error("cannot remove backend record", { incarnation: p.id.incarnation, err });
        });
        ports.release(p.id.port);
        void p.logs.remove();
        logger.info("backend exited", { incarnation: p.id.incarnation, model: p.id.model, pid: p.pid, exitCode: to.exit.exitCode, signal: to.exit.signal, intentional: to.intentional, lastStderrLine: to.lastStderrLine });
        watchEvent(p, { case: "exited", value: { exitCode: to.exit.exitCode ?? undefined, signal: to.exit.signal, intentional: to.intentional, lastStderrLine: to.lastStderrLine } });
        break;
      case "spawning":
      case "loading":
      case "stopping":
        break;
    }
  };

  const evictions = new EvictionOutbox(logger);
  // Completed pulls and start-driven bundle installs, until a coordinator audits them (report-outbox.ts).
  const pulls = new ReportOutbox<PullRecord>({ ...pullReportBounds, what: "artifact pulls", log: logger });
  const installs = new ReportOutbox<StartInstallRecord>({ ...bundleInstallReportBounds, what: "bundle installs by starts", log: logger });
  const artifacts = config.modelsPath === undefined ? undefined : new ArtifactCache({ modelsPath: config.modelsPath, clock, logger, onEvicted: (e) => { evictions.record(e); }, onPulled: (p) => { pulls.record(p); }, pullTimeoutMs: config.artifactPullTimeoutMs, stallTimeoutMs: config.artifactStallTimeoutMs, storeReader: deps.storeReader, budgetBytes: config.artifactCacheBudgetBytes, liveDigests: () => table.live().map((p) => liveCacheDigests(p.id, config.catalog)), ...(deps.artifactFreeBytes === undefined ? {} : { freeBytes: deps.artifactFreeBytes }), ...(deps.peerClients === undefined ? {} : { peers: { selfNodeId: config.nodeId, clients: deps.peerClients } }), ...(deps.registryLogin === undefined ? {} : { registryLogin: deps.registryLogin }) });
  // What placement must count of each catalog bundle (heartbeat): images' sizes read in the background from start().
  const bundleReport = artifacts === undefined ? undefined : new BundleReport({ catalog: config.catalog, cache: artifacts.index, clock, logger, listLayers: deps.bundleLayers ?? registryLayers(deps.registryLogin) });
  const ctx: AgentContext = {
    config,
    clock,
    logger,
    envSource: deps.env ?? process.env,
    procRoot,
    logDir: join(config.stateDir, "logs"),
    mark,
    backendAuth: backendAuthOf(config),
    records,
    ports,
    locks: new ModelLocks(),
    artifacts,
    bundles: config.modelsPath === undefined || artifacts === undefined ? undefined : new BundleInstaller({ modelsPath: config.modelsPath, cache: artifacts, logger, onStartInstalled: (r) => { installs.record(r); }, ...(deps.registryLogin === undefined ? {} : { registryLogin: deps.registryLogin }), ...(deps.findPeers === undefined ? {} : { findPeers: deps.findPeers }) }),
    hub,
    probe: createMemoryProbe({ nvidiaSmiPath: config.nvidiaSmiPath, procRoot }),
    table,
    pendingSpawns: new PendingSpawns(),
    starts: new StartRegistry((inc) => table.has(inc)),
    bootEpochMs,
    reports,
    scan,
    fence,
    closing: closing.signal,
    watchesEnded: watchesEnd.signal,
    processDeps: { clock, graceMs: config.graceMs, logger, onTransition },
    isStarted: () => started,
    persist: (p) => {
      records.write(recordOf(p)).catch((err: unknown) => {
        logger.error("cannot write backend record", { incarnation: p.id.incarnation, err });
      });
    },
    watchEvent,
  };

  const health = new HealthMonitor({
    clock,
    intervalMs: config.healthIntervalMs,
    timeoutMs: Math.min(config.readiness.intervalMs, config.healthIntervalMs),
    list: () => [...table.values()].filter((p) => p.state().t === "ready").map((p) => ({ incarnation: p.id.incarnation, address: p.id.address, ...backendClientTls(Object.hasOwn(config.catalog, p.id.backend) ? config.catalog[p.id.backend] : undefined) })),
    ...(ctx.backendAuth === undefined ? {} : { headers: ctx.backendAuth.headers }),
    onChange: (incarnation, healthy, detail) => {
      const p = table.get(incarnation);
      if (p === undefined || p.state().t !== "ready") return;
      logger.warn("backend health changed", { incarnation, healthy, detail });
      watchEvent(p, { case: "health", value: { healthy, detail } });
    },
  });

  const inventory = (signal?: AbortSignal): Promise<InventorySnapshot> => takeInventory(ctx, bootEpochMs, signal);
  const nodeResources = (signal?: AbortSignal): Promise<NodeResourcesInit> => measureNodeResources(ctx, signal);
  const rescanOrphans = (): Promise<Orphan[]> => scan.rescan();

  const start = async (): Promise<AdoptionReport> => {
    if (started) throw new WardenError(Code.FailedPrecondition, "agent already started");
    // Before anything is served: a fence read as 0 would let a stale leader in.
    await fence.load();
    const report = await adoptFromStateDir(ctx);
    started = true;
    // Never awaited: a registry that is down leaves the images' sizes unknown, not the agent unstarted.
    if (bundleReport?.any() === true) void bundleReport.resolve(closing.signal);
    report.orphans = await rescanOrphans().catch(() => []);
    scan.schedule();
    health.start();
    return report;
  };

  const close = async (options: { stopBackends: boolean }): Promise<void> => {
    if (closing.signal.aborted) return;
    closing.abort(new WardenError(Code.Canceled, "agent shutting down"));
    scan.stop();
    health.stop();
    await Promise.allSettled(ctx.starts.allDone());
    const live = table.live();
    if (options.stopBackends) {
      await Promise.allSettled(
        live.map(async (p) => {
          const c = createClient(Backend, p.id.address, { ...backendClientTls(Object.hasOwn(config.catalog, p.id.backend) ? config.catalog[p.id.backend] : undefined), ...(ctx.backendAuth === undefined ? {} : { headers: ctx.backendAuth.headers }) });
          try {
            await c.free({}, { timeoutMs: config.freeTimeoutMs });
          } catch (err) {
            const e = WardenError.from(err);
            if (e.code !== Code.Unimplemented) logger.warn("Free before stop failed; stopping anyway", { incarnation: p.id.incarnation, err: e.message });
          } finally {
            c.close();
          }
          p.noteStopRequested({ incarnation: p.id.incarnation, reason: "agent-exit", atMs: clock.wallNow() });
          await p.stop(false);
        }),
      );
    } else {
      for (const p of live) p.handle.detach();
    }
    await records.flush();
  };

  const endWatches = (): void => {
    if (!watchesEnd.signal.aborted) watchesEnd.abort(new WardenError(Code.Unavailable, "agent shutting down"));
  };

  return {
    config,
    bootEpochMs,
    endWatches,
    artifacts,
    service: createAgentService(ctx, { bootEpochMs, inventory, nodeResources }),
    start,
    close,
    inventory,
    nodeResources,
    nextReportSequence: () => reports.next(),
    rescanOrphans,
    foreign: () => scan.foreign(),
    leaderEpoch: () => fence.newestSeen(),
    artifactCache: async () => {
      const cache = ctx.artifacts;
      if (cache === undefined) return undefined;
      const r = await cache.report().catch(() => undefined);
      if (r === undefined) return undefined;
      const b = bundleReport?.any() === true ? bundleReport.snapshot() : undefined;
      return { ...r, digests: () => cache.index.digests(), ...(b === undefined ? {} : { bundlesVersion: b.version, bundles: () => b.states }), evictions: () => evictions.next(), evictionsAcknowledged: (id) => { evictions.acknowledged(id); }, pulls: () => pulls.next(), pullsAcknowledged: (id) => { pulls.acknowledged(id); }, bundleInstalls: () => installs.next(), bundleInstallsAcknowledged: (id) => { installs.acknowledged(id); } };
    },
    raiseLeaderEpoch: (epoch) => fence.raise(epoch),
    auditDropped: () => ({ pulls: pulls.dropped(), bundleInstalls: installs.dropped() }),
    processes: () =>
      table.live().map((p) => ({ incarnation: p.id.incarnation, model: p.id.model, pid: p.pid, address: p.id.address, state: p.state().t })),
  };
}
