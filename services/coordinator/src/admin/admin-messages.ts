import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { InstanceState, NodeState, OutageServing, Placement, type ModelInstanceSchema, type NodeSchema, type PolicySchema } from "@warden/proto";
import type { Clock } from "@warden/common";
import type { Loader } from "@warden/loader";
import type { InstanceView } from "@warden/watchdog";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { NodeRecord } from "../nodes/node-registry.js";
import { awaitsInventory } from "@warden/cluster";
import type { NodeLimitFields } from "./replica-admin.js";

// The AdminService's read model: how instances, nodes and the policy look on
// the wire (split from admin-service.ts, which keeps the calls).

export type ModelInstanceInit = MessageInitShape<typeof ModelInstanceSchema>;
export type NodeInit = MessageInitShape<typeof NodeSchema>;
export type PolicyInit = MessageInitShape<typeof PolicySchema>;

/** Monotonic clock ms → wall timestamp. */
function wallTs(clock: Clock, monoMs: number | undefined): ReturnType<typeof timestampFromMs> | undefined {
  if (monoMs === undefined) return undefined;
  return timestampFromMs(Math.round(clock.wallNow() - (clock.now() - monoMs)));
}

/**
 * The API state of an instance's node; UNSPECIFIED when the node is not registered. A node that
 * registered but has not sent its first inventory is NOT_REPORTED, not READY: nothing is placed
 * on it until what runs there is known.
 */
export function nodeStateOf(n: NodeRecord | undefined): NodeState {
  if (n === undefined) return NodeState.UNSPECIFIED;
  if (n.state === "ready") return awaitsInventory(n) ? NodeState.NOT_REPORTED : NodeState.READY;
  return n.state === "unreachable" ? NodeState.UNREACHABLE : NodeState.LOST;
}

/** What the listings show of serving through an agent outage (nodes/outage-serving.ts). */
export interface OutageView {
  stateOf(incarnation: string): { readonly t: "serving" | "failed" } | undefined;
  /** Instances of the node serving on while its agent is unreachable. */
  servingOn(nodeId: string): number;
}

/**
 * One watchdog instance as ListModels shows it. `nodeState` travels with it so
 * a ready instance on an unreachable node is not shown as plainly ready.
 */
export function modelInstance(deps: { readonly clock: Clock; readonly loader: Loader<BackendClientHandle>; readonly outage?: OutageView }, v: InstanceView, nodeState: NodeState): ModelInstanceInit {
  const h = deps.loader.heldInstance(v.incarnation);
  const probe = deps.outage?.stateOf(v.incarnation)?.t;
  const state =
    v.pendingEviction !== undefined
      ? InstanceState.PENDING_EVICTION
      : v.state === "ready"
        ? InstanceState.READY
        : v.state === "freed"
          ? InstanceState.FREED
          : InstanceState.LOADING;
  const placement = h === undefined ? Placement.REMOTE_ONLY : h.placement === "local" ? Placement.LOCAL : h.placement === "local-remote" ? Placement.LOCAL_REMOTE : Placement.REMOTE_ONLY;
  return {
    model: v.model,
    nodeId: v.nodeId,
    address: v.address ?? "",
    incarnation: v.incarnation,
    placement,
    state,
    inFlight: v.inFlight,
    busySince: wallTs(deps.clock, v.busySinceMs),
    idleSince: wallTs(deps.clock, v.idleSinceMs),
    lastUsed: wallTs(deps.clock, v.lastUsedMs),
    pendingEviction: v.pendingEviction !== undefined,
    pinned: v.pinned,
    groups: [...v.groups],
    sizeBytes: BigInt(v.sizeBytes),
    backend: deps.loader.modelSpec(v.model)?.backend ?? "",
    nodeState,
    outageServing: probe === undefined ? OutageServing.UNSPECIFIED : probe === "serving" ? OutageServing.SERVING : OutageServing.PROBE_FAILED,
  };
}

/** A node the store says an operator declared lost and that has not registered with this coordinator (HA). */
export function lostPlaceholder(nodeId: string): NodeInit {
  return { nodeId, state: NodeState.LOST };
}

export function nodeInit(n: NodeRecord, instanceCount: number, drainRemaining: number, limits: NodeLimitFields, servingThroughOutage = 0): NodeInit {
  // One literal of plain fields, `resources` set after: spreads into the middle of this literal made V8 build
  // each node's object the slow way (about 13 µs a node, most of a 500-node ListNodes page).
  const out: NodeInit = {
    agentLimits: limits.agentLimits,
    limitsOverride: limits.limitsOverride,
    effectiveLimits: limits.effectiveLimits,
    servingThroughOutage,
    nodeId: n.nodeId,
    address: n.address,
    labels: n.labels,
    state: nodeStateOf(n),
    draining: n.draining,
    drainRemaining,
    lastHeartbeatAt: timestampFromMs(n.lastHeartbeatWallMs),
    bootEpoch: n.bootEpoch,
    instanceCount,
    embedded: n.embedded,
    foreign: n.foreign,
    version: n.version,
    backends: [...n.backends].sort(),
  };
  if (n.resources !== undefined) out.resources = n.resources;
  return out;
}

export function policyInit(loader: Loader, enforcement: { readonly maxAttempts: number; readonly intervalMs: number }): PolicyInit {
  const p = loader.getPolicy();
  return {
    limitPerNode: p.limitPerNode,
    idleCheck: p.idleCheck,
    idleTimeoutMs: BigInt(p.idleTimeoutMs),
    busyCheck: p.busyCheck,
    busyTimeoutMs: BigInt(p.busyTimeoutMs),
    memoryReclaimer: p.memoryReclaimer,
    memoryThreshold: p.memoryThreshold,
    forceEvictionWhenBusy: p.forceEvictionWhenBusy,
    sizeAware: p.sizeAware,
    tickIntervalMs: BigInt(p.tickIntervalMs),
    enforcementRetries: enforcement.maxAttempts,
    enforcementRetryIntervalMs: BigInt(enforcement.intervalMs),
    models: loader.modelSpecs().map((m) => ({ model: m.id, pinned: m.pinned, groups: [...m.groups] })),
  };
}
