import { HeartbeatResponseSchema, type ArtifactPull, type BundleInstall, type HeartbeatRequest, type HeartbeatResponse, type NodeService } from "@warden/proto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { encodedOnce, type HandlerContext, type RequestBytes, type ServiceImpl } from "@warden/grpc";
import type { HeartbeatAnswer } from "@warden/cluster";
import { heartbeatStream } from "./heartbeat-stream.js";
import { TurnBudget } from "./turn-budget.js";
import { Code, WardenError, invalidArgument, peerKeyBytes, type Clock } from "@warden/common";
import type { NodeRecord, NodeRegistry } from "./node-registry.js";
import { nodeReportLimits, validateHeartbeat, validateRegister, type HeartbeatCaps } from "./node-report-limits.js";
import { nodeLimitsFromWire } from "./node-limits-wire.js";
import { findPeers } from "./find-peers.js";

/**
 * The peer name of the coordinator's own in-process calls (inProcessNodeService).
 * A gRPC peer is the socket's address, so no remote caller can present it.
 */
const inProcessPeer = "in-process";

type HeartbeatResponseInit = MessageInitShape<typeof HeartbeatResponseSchema>;

/** Streamed heartbeats answered per turn of the event loop, in ms of work: timers and other calls run between turns. */
export const heartbeatTurnBudgetMs = 10;

/** A stream that ends with `e` before any reply (an error status, never a synchronous throw). */
// eslint-disable-next-line require-yield -- it only fails
async function* refusedStream(e: WardenError): AsyncIterable<HeartbeatResponseInit> {
  throw e;
}

/**
 * NodeService: agents register and heartbeat (DESIGN §4). Each request is
 * validated whole (node-report-limits.ts) before anything is applied: a
 * refused report leaves the registry, the loader and the audit stream as
 * they were.
 */
/** Told of each artifact an agent evicted from its cache (once; coordinator.ts audits it as artifact.evicted). */
export type EvictionListener = (nodeId: string, e: { readonly sha256: string; readonly sizeBytes: bigint; readonly reason: string }) => void;

/** Told of each pull an agent completed into its cache (once; coordinator.ts audits it as artifact.pulled). */
export type PullListener = (nodeId: string, p: ArtifactPull) => void;
/** Told of each bundle a start installed (once; coordinator.ts audits it as backend.installed with the start). */
export type BundleInstallListener = (nodeId: string, b: BundleInstall) => void;

/**
 * What one node's reports of one kind carried last (boot epoch, highest id):
 * a record re-sent after a lost answer is passed on once. A new boot epoch
 * starts the ids again.
 */
class SeenIds {
  private readonly seen = new WeakMap<NodeRecord, { bootEpoch: bigint; lastId: bigint }>();

  /** The records of `list` not passed on before, in order. */
  fresh<T extends { readonly id: bigint }>(n: NodeRecord, bootEpoch: bigint, list: readonly T[]): T[] {
    if (list.length === 0) return [];
    const s = this.seen.get(n);
    let lastId = s?.bootEpoch === bootEpoch ? s.lastId : 0n;
    const out: T[] = [];
    for (const e of list) {
      if (e.id <= lastId) continue;
      lastId = e.id;
      out.push(e);
    }
    this.seen.set(n, { bootEpoch, lastId });
    return out;
  }
}

export interface NodeServiceOptions {
  readonly credentialed?: boolean;
  readonly caps?: HeartbeatCaps;
  readonly ha?: { readonly leaderEpoch: () => bigint; readonly onSuperseded: (newerEpoch: bigint, detail: string) => void };
  readonly onEvicted?: EvictionListener;
  readonly onPulled?: PullListener;
  readonly onStartInstalled?: BundleInstallListener;
  /** false: HeartbeatStream answers UNIMPLEMENTED, as a coordinator without it (agents send unary Heartbeats). @default true */
  readonly heartbeatStream?: boolean;
  /** The node a HeartbeatStream's credentials are bound to (its node token's); undefined: the node its first message names. */
  readonly streamNodeOf?: (ctx: HandlerContext) => string | undefined;
  /** Each HeartbeatStream message once decoded, before it is applied (the node certificate check under mutual TLS): a throw ends the stream with it. */
  readonly streamCheck?: (req: HeartbeatRequest, ctx: HandlerContext) => void;
}

/** The HeartbeatStream methods whose requests GrpcServer hands over as their bytes (`encodedRequests`): heartbeat-stream.ts decodes each in its turn. */
export const nodeServiceEncodedRequests = ["heartbeatStream"] as const;

/** NodeService as served: HeartbeatStream takes its requests as their bytes (nodeServiceEncodedRequests). */
export type NodeServiceImpl = Omit<ServiceImpl<typeof NodeService>, "heartbeatStream"> & {
  heartbeatStream(requests: AsyncIterable<RequestBytes<HeartbeatRequest>>, ctx: HandlerContext): AsyncIterable<HeartbeatResponseInit>;
};

export function nodeService(nodes: NodeRegistry, clock: Clock, coordinatorEpoch: bigint, options: NodeServiceOptions = {}): NodeServiceImpl {
  /** Node id → FindPeers it holds open now (find-peers.ts bounds them). */
  const openPeerGrants = new Map<string, number>();
  const evictionsSeen = new SeenIds();
  const pullsSeen = new SeenIds();
  const installsSeen = new SeenIds();
  // Remote registrations are credentialed when auth is on (the guard admitted a token bound to the node id).
  const credentialed = options.credentialed ?? false;
  const caps = options.caps ?? nodeReportLimits;
  // Heartbeats on streams answered at most this long per turn of the event loop (turn-budget.ts).
  const budget = new TurnBudget({ budgetMs: heartbeatTurnBudgetMs, nowMs: () => clock.now() });
  /** Only the embedded agent, calling in process, may speak for the embedded node. */
  const checkEmbedded = (nodeId: string, peer: string): boolean => {
    const embedded = nodes.get(nodeId)?.embedded === true;
    if (embedded && peer !== inProcessPeer) throw new WardenError(Code.PermissionDenied, `node_id: "${nodeId}" is the coordinator's embedded agent; a remote agent needs its own node id`, { details: { field: "node_id" } });
    return embedded;
  };
  /** An agent saw a newer leader's command than ours: another coordinator leads (a paused term has no epoch to compare; its lease watch covers it). */
  const supersededBy = (ha: NonNullable<typeof options.ha>, seen: bigint, nodeId: string): void => {
    let ours: bigint;
    try {
      ours = ha.leaderEpoch();
    } catch {
      return;
    }
    if (seen > ours) ha.onSuperseded(seen, `node "${nodeId}" reports leader epoch ${String(seen)}, newer than ours (${String(ours)})`);
  };
  /** Our term's epoch for the agent's fence (0: no HA, or a paused term, which commands nothing). */
  const ourEpoch = (): bigint => {
    if (options.ha === undefined) return 0n;
    try {
      return options.ha.leaderEpoch();
    } catch {
      return 0n;
    }
  };
  /**
   * The answers to heartbeats, one per kind, each encoded once (encodedOnce):
   * nearly every heartbeat gets the same "ok" answer, so it is not encoded
   * again per heartbeat. Made anew when the leader epoch it carries changes.
   */
  const answers = new Map<HeartbeatAnswer, Readonly<HeartbeatResponse>>();
  const answerOf = (answer: HeartbeatAnswer): Readonly<HeartbeatResponse> => {
    const leaderEpoch = ourEpoch();
    const known = answers.get(answer);
    if (known?.leaderEpoch === leaderEpoch) return known;
    const made = encodedOnce(HeartbeatResponseSchema, { registerRequired: answer === "register", coordinatorEpoch, leaderEpoch, fullInventoryRequired: answer === "send-full" });
    answers.set(answer, made);
    return made;
  };
  /** One heartbeat, unary or on a stream: validated whole, then applied. */
  const beat = (req: HeartbeatRequest, ctx: HandlerContext): HeartbeatResponseInit => {
    validateHeartbeat(req, caps);
    checkEmbedded(req.nodeId, ctx.peer);
    if (options.ha !== undefined && req.leaderEpoch > 0n) supersededBy(options.ha, req.leaderEpoch, req.nodeId);
    const d = req.delta;
    const delta = d === undefined ? undefined : { baseSequence: d.baseSequence, upserts: d.upserts, removed: d.removed, digest: d.digest };
    const answer = nodes.receive({ nodeId: req.nodeId, bootEpoch: req.bootEpoch, sequence: req.sequence, backends: req.backends, ...(delta === undefined ? {} : { delta }), orphans: req.orphans, foreign: req.foreign, resources: req.resources, ...(req.artifactCache === undefined ? {} : { artifactCache: req.artifactCache }) });
    // Cache evictions, pulls and start-driven bundle installs, audited once each: only from a heartbeat
    // applied, ids already seen from this boot dropped (a re-send after a lost answer).
    const n = answer === "ok" ? nodes.get(req.nodeId) : undefined;
    const c = req.artifactCache;
    if (n !== undefined && c !== undefined) {
      for (const e of evictionsSeen.fresh(n, req.bootEpoch, options.onEvicted === undefined ? [] : c.evictions)) options.onEvicted?.(n.nodeId, { sha256: Buffer.from(e.sha256).toString("hex"), sizeBytes: e.sizeBytes, reason: e.reason });
      for (const p of pullsSeen.fresh(n, req.bootEpoch, options.onPulled === undefined ? [] : c.pulls)) options.onPulled?.(n.nodeId, p);
      for (const b of installsSeen.fresh(n, req.bootEpoch, options.onStartInstalled === undefined ? [] : c.bundleInstalls)) options.onStartInstalled?.(n.nodeId, b);
    }
    return answerOf(answer);
  };
  return {
    async register(req, ctx) {
      validateRegister(req, ctx.peer === inProcessPeer && nodes.get(req.nodeId)?.embedded === true);
      const limits = nodeLimitsFromWire(req.limits, "limits");
      if (req.peerKey.length !== 0 && req.peerKey.length !== peerKeyBytes) throw invalidArgument("peer_key", `must be empty or ${String(peerKeyBytes)} bytes, got ${String(req.peerKey.length)}`);
      const existing = nodes.get(req.nodeId);
      if (checkEmbedded(req.nodeId, ctx.peer) && existing !== undefined) {
        // The embedded agent re-registers in process; keep its in-process client.
        nodes.register({ nodeId: req.nodeId, address: existing.address, labels: req.labels, gpus: req.gpus, bootEpoch: req.bootEpoch, embedded: true, client: existing.client, version: req.version, backends: req.backends, backendBundles: req.backendBundles, limits });
      } else {
        nodes.register({ nodeId: req.nodeId, address: req.address, labels: req.labels, gpus: req.gpus, bootEpoch: req.bootEpoch, version: req.version, backends: req.backends, backendBundles: req.backendBundles, limits, credentialed });
      }
      // After the checks above: a refused Register changes nothing.
      nodes.peers.setKey(req.nodeId, req.peerKey);
      return { coordinatorEpoch, heartbeatIntervalMs: 1_000, leaderEpoch: ourEpoch() };
    },
    async heartbeat(req, ctx) {
      return beat(req, ctx);
    },
    heartbeatStream(requests, ctx) {
      // As a coordinator without the method: the agent sends unary Heartbeats.
      if (options.heartbeatStream === false) return refusedStream(new WardenError(Code.Unimplemented, "this coordinator does not serve HeartbeatStream (heartbeatStream: false): send unary Heartbeats"));
      return heartbeatStream(requests, ctx, {
        boundNodeOf: options.streamNodeOf ?? (() => undefined),
        beat,
        budget,
        arrived: (nodeId, bootEpoch) => {
          nodes.arrived(nodeId, bootEpoch);
        },
        released: (nodeId, bootEpoch) => {
          nodes.released(nodeId, bootEpoch);
        },
        ...(options.streamCheck === undefined ? {} : { check: options.streamCheck }),
      });
    },
    async *findPeers(req, ctx) {
      // The embedded node's own agent never asks (it serves no peers); nobody else may speak for it.
      if (req.nodeId !== "") checkEmbedded(req.nodeId, ctx.peer);
      yield* findPeers(req, ctx, { peers: nodes.peers, clock, registered: (id) => nodes.get(id) !== undefined, open: openPeerGrants });
    },
  };
}
