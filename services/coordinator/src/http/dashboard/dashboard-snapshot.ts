import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { InstanceState, LoadJobPhase, LoadJobState, NodeState, OutageServing, PlacementDecision, type AdminService, type ExplainPlacementResponse, type LoadJob, type ModelInstance, type ModelReplicas, type Node } from "@warden/proto";
import type { Client } from "@warden/grpc";
import type { DashboardInstance, DashboardInstanceState, DashboardLoadJob, DashboardNode, DashboardNodeState, DashboardReplicas, DashboardSnapshot } from "./dashboard-view.js";

/** What a snapshot reads: the Admin API (in process) and Warden's per-node accounting. */
export interface SnapshotSource {
  readonly admin: Pick<Client<typeof AdminService>, "listNodes" | "listModels">;
  /** Bytes the watchdog accounts on a node (the figure placement uses). */
  readonly accountedBytes: (nodeId: string) => number;
  readonly wallNowMs: () => number;
}

function iso(t: Timestamp | undefined): string {
  return t === undefined ? "" : timestampDate(t).toISOString();
}

export function nodeStateName(s: NodeState): DashboardNodeState {
  switch (s) {
    case NodeState.READY:
      return "ready";
    case NodeState.UNREACHABLE:
      return "unreachable";
    case NodeState.LOST:
      return "lost";
    case NodeState.NOT_REPORTED:
      return "not reported since restart";
    default:
      return "unknown";
  }
}

export function instanceStateName(s: InstanceState): DashboardInstanceState {
  switch (s) {
    case InstanceState.LOADING:
      return "loading";
    case InstanceState.READY:
      return "ready";
    case InstanceState.FREED:
      return "freed";
    case InstanceState.PENDING_EVICTION:
      return "pending-eviction";
    case InstanceState.LEFTOVER:
      return "leftover";
    case InstanceState.ORPHAN:
      return "orphan";
    default:
      return "unknown";
  }
}

export function dashboardNode(n: Node, accountedBytes: number): DashboardNode {
  const r = n.resources;
  return {
    nodeId: n.nodeId,
    address: n.address,
    state: nodeStateName(n.state),
    draining: n.draining,
    drainRemaining: n.drainRemaining,
    embedded: n.embedded,
    version: n.version,
    labels: { ...n.labels },
    gpus: (r?.gpus ?? []).map((g) => ({ index: g.index, name: g.name, totalBytes: Number(g.totalBytes), usedBytes: Number(g.usedBytes) })),
    ramTotalBytes: Number(r?.ramTotalBytes ?? 0n),
    ramUsedBytes: Number(r?.ramUsedBytes ?? 0n),
    accountedBytes,
    foreign: n.foreign.map((f) => ({ pid: f.pid, address: f.address, detail: f.detail })),
    lastHeartbeatAt: iso(n.lastHeartbeatAt),
    instanceCount: n.instanceCount,
  };
}

export function dashboardInstance(i: ModelInstance): DashboardInstance {
  return {
    model: i.model,
    nodeId: i.nodeId,
    incarnation: i.incarnation,
    address: i.address,
    state: instanceStateName(i.state),
    inFlight: i.inFlight,
    lastUsedAt: iso(i.lastUsed),
    busySince: iso(i.busySince),
    sizeBytes: Number(i.sizeBytes),
    pinned: i.pinned,
    groups: [...i.groups],
    backend: i.backend,
    nodeState: nodeStateName(i.nodeState),
    ...(i.outageServing === OutageServing.UNSPECIFIED ? {} : { outage: i.outageServing === OutageServing.SERVING ? ("serving" as const) : ("probe failed" as const) }),
    ...(i.leftover === undefined ? {} : { leftover: { attempts: i.leftover.attempts, lastError: i.leftover.lastError, stuck: i.leftover.stuck } }),
  };
}

export function dashboardReplicas(r: ModelReplicas): DashboardReplicas {
  const b = r.blocked;
  return { model: r.model, min: r.min, max: r.max, desired: r.desired, ready: r.ready, loading: r.loading, stopping: r.stopping, leftovers: r.leftovers, queued: r.queued, ...(b === undefined ? {} : { blocked: { error: b.error, failures: b.failures, retryAfterMs: Number(b.retryAfterMs) } }) };
}

/** Pages a snapshot reads per listing at most (the node table's cap is 4 096 nodes; 1 000 entries a page). */
const maxSnapshotPages = 200;

/** The whole view from every page of the Admin API's ListNodes and ListModels (the same reads the CLI shows). */
export async function takeSnapshot(src: SnapshotSource, signal?: AbortSignal): Promise<DashboardSnapshot> {
  const opts = signal === undefined ? {} : { signal };
  const nodesP = (async () => {
    const out: Node[] = [];
    let pageToken = "";
    for (let i = 0; i < maxSnapshotPages; i++) {
      const r = await src.admin.listNodes({ pageSize: 1_000, pageToken }, opts);
      out.push(...r.nodes);
      pageToken = r.nextPageToken;
      if (pageToken === "") break;
    }
    return out;
  })();
  const first = await src.admin.listModels({ pageSize: 1_000 }, opts);
  const instances = [...first.instances];
  let pageToken = first.nextPageToken;
  for (let i = 1; i < maxSnapshotPages && pageToken !== ""; i++) {
    const r = await src.admin.listModels({ pageSize: 1_000, pageToken }, opts);
    instances.push(...r.instances);
    pageToken = r.nextPageToken;
  }
  const nodes = await nodesP;
  const jobs = new Map<string, LoadJob>();
  for (const r of first.replicas) if (r.loadJob !== undefined) jobs.set(r.model, r.loadJob);
  return {
    at: new Date(src.wallNowMs()).toISOString(),
    nodes: nodes.map((n) => dashboardNode(n, src.accountedBytes(n.nodeId))),
    instances: instances.map(dashboardInstance),
    models: first.configured.map((m) => {
      const job = jobs.get(m.model);
      return { model: m.model, backend: m.backend, groups: [...m.groups], pinned: m.pinned, sizeBytes: Number(m.sizeBytes), ...(job === undefined ? {} : { loadJob: dashboardLoadJob(job) }) };
    }),
    replicas: first.replicas.map(dashboardReplicas),
  };
}

const jobStates: Readonly<Record<LoadJobState, DashboardLoadJob["state"] | undefined>> = {
  [LoadJobState.UNSPECIFIED]: undefined,
  [LoadJobState.WAITING]: "waiting",
  [LoadJobState.LOADING]: "loading",
  [LoadJobState.FAILED]: "failed",
};

export function dashboardLoadJob(j: LoadJob): DashboardLoadJob {
  return {
    state: jobStates[j.state] ?? "failed",
    phase: LoadJobPhase[j.phase].toLowerCase(),
    nodeId: j.nodeId,
    reason: j.reason,
    code: j.code,
    forMs: Number(j.forMs),
    bytesDone: Number(j.bytesDone),
    bytesTotal: Number(j.bytesTotal),
    bytesPerSecond: Number(j.bytesPerSecond),
  };
}

const decisionNames: Readonly<Record<PlacementDecision, string>> = {
  [PlacementDecision.UNSPECIFIED]: "unspecified",
  [PlacementDecision.PLACE]: "place",
  [PlacementDecision.EVICT_THEN_PLACE]: "evict-then-place",
  [PlacementDecision.NO_FIT]: "no-fit",
  [PlacementDecision.ALREADY_LOADED]: "already-loaded",
  [PlacementDecision.WAIT]: "wait",
};

/** ExplainPlacement's answer as plain JSON, with `at`: the coordinator's wall clock when it answered (the page dates the answer by it). */
export function explainJson(r: ExplainPlacementResponse, wallNowMs: number): Record<string, unknown> {
  return {
    at: new Date(wallNowMs).toISOString(),
    decision: decisionNames[r.decision],
    nodeId: r.nodeId,
    reason: r.reason,
    nodes: r.nodes.map((n) => ({ nodeId: n.nodeId, fits: n.fits, reason: n.reason, freeBytes: Number(n.freeBytes), score: n.score, wouldEvict: [...n.wouldEvict] })),
    // The decision weighed every node; `nodes` is the first page of their verdicts (ExplainPlacement's default, 100).
    nodesTotal: r.nodesTotal,
    nodesFit: r.nodesFit,
    nodesFitAfterEviction: r.nodesFitAfterEviction,
  };
}
