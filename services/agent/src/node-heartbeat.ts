import type { EvictionRecord } from "./eviction-outbox.js";
import type { PullRecord } from "./artifact-cache.js";
import type { StartInstallRecord } from "./backend-bundle.js";
import type { BundleState } from "./bundle-report.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, backoffDelayMs, isNotLeader, invalidArgument, cryptoRng, nullLogger, sleep, systemClock, wardenVersion, type BackoffPolicy, type Clock, type Logger, type Rng } from "@warden/common";
import type { HandlerContext, ServiceImpl } from "@warden/grpc";
import { Metadata } from "@grpc/grpc-js";
import { type ArtifactPullSchema, type BundleInstallSchema, HeartbeatRequestSchema, HeartbeatResponseSchema, InventoryEntrySchema, RegisterRequestSchema, RegisterResponseSchema, type HeartbeatResponse, type NodeLimitsSchema, type NodeService, type RegisterResponse } from "@warden/proto";
import { create } from "@bufbuild/protobuf";
import { isAborted } from "./is-aborted.js";
import { InventoryDeltaWriter } from "./inventory-delta-writer.js";
import type { InventorySnapshot, NodeResourcesInit } from "./agent.js";

/** Options of one NodeService call. */

/** Orphans and foreign processes per heartbeat: the coordinator's bound (1024 each). */
const maxReportedProcesses = 1024;
/** Catalog names per Register: the coordinator's bound (256). */
const maxCatalogBackends = 256;
export interface NodeCallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/**
 * The coordinator's NodeService as the heartbeat sees it. A grpc client from
 * `createClient(NodeService, address)` fits as is; an in-process implementation
 * fits through {@link inProcessNodeService}.
 */
export interface NodeServicePort {
  register(request: MessageInitShape<typeof RegisterRequestSchema>, options?: NodeCallOptions): Promise<Pick<RegisterResponse, "coordinatorEpoch" | "heartbeatIntervalMs"> & { readonly leaderEpoch?: bigint }>;
  heartbeat(request: MessageInitShape<typeof HeartbeatRequestSchema>, options?: NodeCallOptions): Promise<Pick<HeartbeatResponse, "registerRequired" | "coordinatorEpoch"> & { readonly leaderEpoch?: bigint; readonly fullInventoryRequired?: boolean }>;
}

/** What the heartbeat reports; an Agent fits. */
export interface HeartbeatSource {
  readonly bootEpochMs: number;
  inventory(signal?: AbortSignal): Promise<InventorySnapshot>;
  nodeResources(signal?: AbortSignal): Promise<NodeResourcesInit>;
  /** The agent's report sequence (report-sequence.ts); without one the loop numbers its own reports. */
  nextReportSequence?(): bigint;
  /** Raises the agent's leader-epoch fence to the epoch the coordinator answered with (HA; an Agent fits). */
  raiseLeaderEpoch?(epoch: bigint): Promise<void>;
  /** The artifact cache's state (an agent with a modelsPath); undefined = none to report. */
  artifactCache?(): Promise<ArtifactCacheSnapshot | undefined>;
}

/** What the heartbeat reports of the artifact cache (HeartbeatRequest.artifact_cache). */
export interface ArtifactCacheSnapshot {
  readonly freeBytes: number;
  readonly evictableBytes: number;
  /** Changes whenever the set of digests does: the set is sent only then (and with full inventories). */
  readonly digestsVersion: number;
  digests(): readonly string[];
  /** Changes whenever the bundle states do: the list is sent only then (and with full inventories). Absent with `bundles`: none reported. */
  readonly bundlesVersion?: number;
  /** Each catalog backend with a bundle (bundle-report.ts), at most 256. */
  bundles?(): readonly BundleState[];
  /** Evictions no acknowledged heartbeat carried yet (eviction-outbox.ts); absent = none reported. */
  evictions?(): readonly EvictionRecord[];
  evictionsAcknowledged?(upToId: number): void;
  /** Completed pulls no acknowledged heartbeat carried yet (report-outbox.ts); absent = none reported. */
  pulls?(): readonly (PullRecord & { readonly id: number })[];
  pullsAcknowledged?(upToId: number): void;
  /** Bundles starts installed that no acknowledged heartbeat carried yet; absent = none reported. */
  bundleInstalls?(): readonly (StartInstallRecord & { readonly id: number })[];
  bundleInstallsAcknowledged?(upToId: number): void;
}

export interface NodeHeartbeatOptions {
  nodeId: string;
  /** host:port where this agent serves AgentService ("" for an embedded agent). */
  address: string;
  labels: Readonly<Record<string, string>>;
  /**
   * Catalog backend names, sent in Register so placement skips this node for
   * a model whose backend it lacks. At most 256 (the agent config's and the
   * coordinator's bound); empty reads as "not reported" (an older agent: any).
   */
  backends: readonly string[];
  /** Backend name -> sha256 of the bundle its catalog entry names (entries with one), sent in Register: instances started from another are rolled. @default {} */
  backendBundles?: Readonly<Record<string, string>>;
  /** Placement limits sent in Register (the agent config's maxReplicasPerModel and memoryBudget). @default {} */
  limits?: MessageInitShape<typeof NodeLimitsSchema>;
  /** This agent's peer key (peer-key.ts), sent in Register so the coordinator can grant peers tickets to its cache. @default none */
  peerKey?: Uint8Array;
  source: HeartbeatSource;
  node: NodeServicePort;
  /** @default 1000 (DESIGN §5); a nonzero heartbeat_interval_ms from Register overrides it */
  intervalMs?: number;
  /**
   * Delta heartbeats: a full inventory at least this often, else only the
   * changes since the last acknowledged one. 0 sends every inventory whole.
   * @default 60 000
   */
  fullInventoryEveryMs?: number;
  /** Timeout of one Register/Heartbeat call. @default 5000 */
  callTimeoutMs?: number;
  /** Retry while the coordinator is unreachable. @default 250 ms × 1.6 up to 5 s, 20 % jitter */
  backoff?: BackoffPolicy;
  clock?: Clock;
  rng?: Rng;
  logger?: Logger;
}

/** Counters for tests and status output. */
export interface HeartbeatStats {
  registrations: number;
  heartbeatsSent: number;
  failures: number;
  lastSequence: bigint;
  registered: boolean;
  coordinatorEpoch: bigint;
  /** Heartbeats sent with the whole inventory, and with a delta. */
  fullInventories: number;
  deltas: number;
  /** Answers asking for a full inventory (a delta the coordinator could not apply). */
  fullRequested: number;
}

export interface NodeHeartbeat {
  /** Starts the loop (idempotent). */
  start(): void;
  /** Stops the loop and waits for the call in flight to end. */
  stop(): Promise<void>;
  stats(): HeartbeatStats;
}

/** The coordinator's bounds on a pull's strings (node-report-limits.ts): path and origin, node ids and names. */
const maxPullTextChars = 256;
const maxNameChars = 128;

/** One completed pull as ArtifactPull. */
function pullOnWire(p: PullRecord & { readonly id: number }): MessageInitShape<typeof ArtifactPullSchema> {
  return { id: BigInt(p.id), sha256: Buffer.from(p.sha256, "hex"), sizeBytes: BigInt(p.sizeBytes), path: p.path.slice(0, maxPullTextChars), model: p.model.slice(0, maxNameChars), backend: p.backend.slice(0, maxNameChars), bundleLayer: p.bundleLayer, origin: p.origin.slice(0, maxPullTextChars), sources: p.sources.map((s) => ({ peerNodeId: s.peerNodeId.slice(0, maxNameChars), bytes: BigInt(s.bytes) })), resumedBytes: BigInt(p.resumedBytes), durationMs: BigInt(Math.max(0, Math.round(p.durationMs))) };
}

/** One start-driven bundle install as BundleInstall. */
function installOnWire(r: StartInstallRecord & { readonly id: number }): MessageInitShape<typeof BundleInstallSchema> {
  return { id: BigInt(r.id), backend: r.backend.slice(0, maxNameChars), sha256: Buffer.from(r.sha256, "hex"), source: r.source.slice(0, maxPullTextChars), model: r.model.slice(0, maxNameChars), incarnation: r.incarnation.slice(0, maxNameChars) };
}

const defaultBackoff: BackoffPolicy = { initialMs: 250, factor: 1.6, maxMs: 5_000, jitter: 0.2 };

/**
 * The agent side of NodeService: Register, then Heartbeat every interval with
 * the inventory (whole, or a delta against the last acknowledged one:
 * InventoryDeltaWriter), orphans, foreign processes, resources, the agent's boot epoch and a sequence that
 * strictly increases for every heartbeat sent in this boot epoch (also across
 * re-registrations and failures), so the coordinator can drop stale reports.
 * `register_required` in a response makes it register again at once; while the
 * coordinator is unreachable it retries with capped, jittered backoff.
 */
export function createNodeHeartbeat(options: NodeHeartbeatOptions): NodeHeartbeat {
  const clock = options.clock ?? systemClock;
  const rng = options.rng ?? cryptoRng;
  const logger = (options.logger ?? nullLogger).child({ component: "heartbeat", nodeId: options.nodeId });
  const callTimeoutMs = options.callTimeoutMs ?? 5_000;
  const backoff = options.backoff ?? defaultBackoff;
  let intervalMs = options.intervalMs ?? 1_000;
  // The coordinator refuses a whole Register over its bound; a catalog that large is refused at config already.
  if (options.backends.length > maxCatalogBackends) throw invalidArgument("catalog", `at most ${String(maxCatalogBackends)} backends, got ${String(options.backends.length)}`);
  const stats: HeartbeatStats = { registrations: 0, heartbeatsSent: 0, failures: 0, lastSequence: 0n, registered: false, coordinatorEpoch: 0n, fullInventories: 0, deltas: 0, fullRequested: 0 };
  const writer = new InventoryDeltaWriter({ fullEveryMs: options.fullInventoryEveryMs ?? 60_000 });
  let ctl: AbortController | undefined;
  let loop: Promise<void> | undefined;
  /** The digests' version the coordinator acknowledged; -1: it holds none of ours (send the set). */
  let ackedDigests = -1;
  /** The same for the bundle states. */
  let ackedBundles = -1;

  // The leader's epoch, raised before this node counts as following it: a
  // paused old leader is refused by every agent that follows the new one.
  const raiseFence = async (epoch: bigint | undefined): Promise<void> => {
    if (epoch !== undefined && epoch > 0n) await options.source.raiseLeaderEpoch?.(epoch);
  };

  const register = async (signal: AbortSignal): Promise<void> => {
    const res = await options.source.nodeResources(signal);
    const r = await options.node.register(
      { nodeId: options.nodeId, address: options.address, labels: { ...options.labels }, gpus: res.gpus ?? [], bootEpoch: BigInt(options.source.bootEpochMs), ramTotalBytes: res.ramTotalBytes ?? 0n, version: wardenVersion, backends: [...options.backends], backendBundles: { ...options.backendBundles }, limits: options.limits ?? {}, ...(options.peerKey === undefined ? {} : { peerKey: options.peerKey }) },
      { signal, timeoutMs: callTimeoutMs },
    );
    await raiseFence(r.leaderEpoch);
    // A coordinator we register with holds no inventory of ours it acknowledged.
    writer.reset();
    ackedDigests = -1;
    ackedBundles = -1;
    stats.registrations++;
    stats.registered = true;
    stats.coordinatorEpoch = r.coordinatorEpoch;
    if (r.heartbeatIntervalMs > 0) intervalMs = r.heartbeatIntervalMs;
    logger.info("registered with coordinator", { coordinatorEpoch: r.coordinatorEpoch, intervalMs });
  };

  const beat = async (signal: AbortSignal): Promise<void> => {
    // Stamped before the inventory is read: a start that saw this number in
    // the table is in it (Spawned.heartbeat_sequence, report-sequence.ts).
    const sequence = options.source.nextReportSequence?.() ?? stats.lastSequence + 1n;
    stats.lastSequence = sequence;
    const [inv, res] = await Promise.all([options.source.inventory(signal), options.source.nodeResources(signal)]);
    // The coordinator refuses a whole report over its bounds (node-report-limits.ts):
    // an honest agent sends at most that many orphans and foreign processes.
    const part = writer.build(sequence, inv.backends.map((b) => create(InventoryEntrySchema, b)), clock.now());
    if (part.t === "full") stats.fullInventories++;
    else stats.deltas++;
    if (part.t === "full") logger.debug("heartbeat sent", { sequence, kind: "full", entries: part.backends.length });
    else logger.debug("heartbeat sent", { sequence, kind: "delta", upserts: part.delta.upserts.length, removed: part.delta.removed.length });
    // The cache's digests travel as a change: only when they changed since the acknowledged ones, or with a full inventory.
    const cache = await options.source.artifactCache?.().catch(() => undefined);
    const sendDigests = cache !== undefined && (part.t === "full" || cache.digestsVersion !== ackedDigests);
    const evicted = cache?.evictions?.() ?? [];
    const pulled = cache?.pulls?.() ?? [];
    const installed = cache?.bundleInstalls?.() ?? [];
    const sendBundles = cache?.bundles !== undefined && cache.bundlesVersion !== undefined && (part.t === "full" || cache.bundlesVersion !== ackedBundles);
    const artifactCache = cache === undefined ? undefined : { freeBytes: BigInt(cache.freeBytes), evictableBytes: BigInt(cache.evictableBytes), ...(sendDigests ? { digests: { sha256: cache.digests().map((d) => Buffer.from(d, "hex")) } } : {}), ...(sendBundles ? { bundles: { states: bundleStatesWire(cache.bundles?.() ?? []) } } : {}), evictions: evicted.map((e) => ({ id: BigInt(e.id), sha256: Buffer.from(e.sha256, "hex"), sizeBytes: BigInt(e.sizeBytes), reason: e.reason.slice(0, 256) })), pulls: pulled.map(pullOnWire), bundleInstalls: installed.map(installOnWire) };
    const r = await options.node.heartbeat(
      { nodeId: options.nodeId, bootEpoch: BigInt(options.source.bootEpochMs), sequence, ...(part.t === "full" ? { backends: part.backends } : { delta: part.delta }), orphans: inv.orphans.slice(0, maxReportedProcesses), foreign: inv.foreign.slice(0, maxReportedProcesses), resources: res, leaderEpoch: inv.leaderEpoch, ...(artifactCache === undefined ? {} : { artifactCache }) },
      { signal, timeoutMs: callTimeoutMs },
    );
    await raiseFence(r.leaderEpoch);
    stats.heartbeatsSent++;
    stats.coordinatorEpoch = r.coordinatorEpoch;
    if (r.registerRequired) {
      logger.info("coordinator asks to register again");
      stats.registered = false;
      writer.reset();
      ackedDigests = -1;
      ackedBundles = -1;
    } else if (r.fullInventoryRequired === true) {
      logger.info("coordinator asks for a full inventory");
      stats.fullRequested++;
      writer.reset();
      ackedDigests = -1;
      ackedBundles = -1;
    } else {
      writer.acknowledged(sequence);
      if (sendDigests) ackedDigests = cache.digestsVersion;
      if (sendBundles) ackedBundles = cache.bundlesVersion ?? -1;
      const last = evicted[evicted.length - 1];
      if (last !== undefined) cache?.evictionsAcknowledged?.(last.id);
      const lastPull = pulled[pulled.length - 1];
      if (lastPull !== undefined) cache?.pullsAcknowledged?.(lastPull.id);
      const lastInstall = installed[installed.length - 1];
      if (lastInstall !== undefined) cache?.bundleInstallsAcknowledged?.(lastInstall.id);
    }
  };

  const run = async (signal: AbortSignal): Promise<void> => {
    let attempt = 0;
    while (!signal.aborted) {
      try {
        if (!stats.registered) await register(signal);
        else await beat(signal);
        attempt = 0;
        // re-register at once when asked; otherwise wait one interval
        if (stats.registered) await sleep(clock, intervalMs, signal);
      } catch (err) {
        if (isAborted(signal)) return;
        stats.failures++;
        const e = WardenError.from(err);
        // a coordinator that lost us answers NOT_FOUND / FAILED_PRECONDITION: register again
        if (e.code === Code.NotFound || e.code === Code.FailedPrecondition) stats.registered = false;
        // A standby's refusal (HA): the cluster is up and a leader is
        // about to lead (or just did). Retry at the first step instead of
        // backing off further, so the new leader hears this node within about
        // one step of taking over rather than up to the 5 s cap later.
        const delayMs = isNotLeader(err) ? backoffDelayMs(backoff, 0, rng) : backoffDelayMs(backoff, attempt++, rng);
        logger.warn("coordinator call failed; retrying", { err: e.message, code: e.code, delayMs });
        await sleep(clock, delayMs, signal).catch(() => {});
      }
    }
  };

  return {
    start() {
      if (loop !== undefined) return;
      ctl = new AbortController();
      loop = run(ctl.signal);
    },
    async stop() {
      ctl?.abort(new WardenError(Code.Canceled, "heartbeat stopped"));
      await loop;
      loop = undefined;
    },
    stats: () => ({ ...stats }),
  };
}

/** ArtifactCacheReport.bundles.states: the catalog's bound (256); an unknown size goes as size_known false. */
function bundleStatesWire(states: readonly BundleState[]): { backend: string; installed: boolean; pullBytes: bigint; sizeKnown: boolean }[] {
  return states.slice(0, maxCatalogBackends).map((s) => ({ backend: s.backend, installed: s.installed, pullBytes: BigInt(s.pullBytes ?? 0), sizeKnown: s.pullBytes !== undefined }));
}

/**
 * Adapts an in-process NodeService implementation (the coordinator's own
 * handlers) to the port, so the embedded agent heartbeats without a socket.
 */
export function inProcessNodeService(impl: Pick<ServiceImpl<typeof NodeService>, "register" | "heartbeat">, peer = "in-process"): NodeServicePort {
  const ctxOf = (o: NodeCallOptions | undefined): HandlerContext => ({
    signal: o?.signal ?? new AbortController().signal,
    metadata: new Metadata(),
    peer,
    deadlineAtMs: o?.timeoutMs === undefined ? undefined : Date.now() + o.timeoutMs,
    responseHeader: new Metadata(),
    responseTrailer: new Metadata(),
  });
  return {
    register: async (req, o) => {
      return create(RegisterResponseSchema, await impl.register(create(RegisterRequestSchema, req), ctxOf(o)));
    },
    heartbeat: async (req, o) => {
      return create(HeartbeatResponseSchema, await impl.heartbeat(create(HeartbeatRequestSchema, req), ctxOf(o)));
    },
  };
}
