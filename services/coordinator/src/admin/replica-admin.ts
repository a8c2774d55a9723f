import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { EventInit } from "@warden/events";
import { Code, WardenError, invalidArgument, type Clock } from "@warden/common";
import type { NodeLimits } from "@warden/cluster";
import type { Loader, ReplicaStatus, ScalePatch } from "@warden/loader";
import { NodeLimitsSetSchema, type ModelReplicasSchema, type NodeSchema, type ScaleModelRequest, type SetNodeLimitsRequest } from "@warden/proto";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import { checkId } from "./check-id.js";
import { loadJobToWire } from "./load-job-wire.js";
import { nodeLimitsFromWire, nodeLimitsToWire } from "../nodes/node-limits-wire.js";
import type { NodeRegistry } from "../nodes/node-registry.js";

type ModelReplicasInit = MessageInitShape<typeof ModelReplicasSchema>;
export type NodeLimitFields = Pick<MessageInitShape<typeof NodeSchema>, "agentLimits" | "limitsOverride" | "effectiveLimits">;

function hasControlChars(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** Longest operator name kept in the replica.scale-set event. */
export const maxOperatorChars = 256;

/** One model's replicas as ListModels, ScaleModel and `/v1/models` show them; `nowMs` is the monotonic clock. */
export function modelReplicasInit(s: ReplicaStatus, nowMs: number): ModelReplicasInit {
  return {
    model: s.model,
    min: s.settings.min,
    max: s.settings.max,
    targetInFlight: s.settings.targetInFlight,
    scaleDownAfterMs: BigInt(s.settings.scaleDownAfterMs),
    desired: s.desired,
    ready: s.ready,
    loading: s.loading,
    stopping: s.stopping,
    leftovers: s.leftovers,
    queued: s.queued,
    ...(s.rollout === undefined ? {} : { rollout: { current: s.rollout.current, stale: s.rollout.stale, keep: s.rollout.keep } }),
    ...(s.blocked === undefined ? {} : { blocked: { error: s.blocked.error, failures: s.blocked.failures, retryAfterMs: BigInt(Math.max(0, Math.ceil(s.blocked.retryAtMs - nowMs))) } }),
  };
}

/** A node's limits as GetNode/ListNodes show them: the agent's, the override, and the effective ones. */
export function nodeLimitFields(nodes: NodeRegistry, nodeId: string): NodeLimitFields {
  return {
    agentLimits: nodeLimitsToWire(nodes.get(nodeId)?.agentLimits ?? {}),
    limitsOverride: nodeLimitsToWire(nodes.limitsOverride(nodeId)),
    effectiveLimits: nodeLimitsToWire(nodes.limitsOf(nodeId), true),
  };
}

/**
 * The request half of ScaleModel (the loader checks the bounds against the
 * model's settings, whole, in Loader.scale): a refused call changes nothing
 * and emits nothing.
 */
/** The audited operator name of ScaleModel and SetNodeLimits. */
function checkOperator(operator: string): void {
  if (operator.length > maxOperatorChars || hasControlChars(operator)) throw invalidArgument("operator", `must be at most ${String(maxOperatorChars)} printable characters`);
}

export function checkScaleModel(req: ScaleModelRequest): { patch: ScalePatch; operator: string } {
  checkId(req.model, "model");
  if (req.min === undefined && req.max === undefined) throw invalidArgument("min", "min or max is required");
  checkOperator(req.operator);
  return { patch: { ...(req.min === undefined ? {} : { min: req.min }), ...(req.max === undefined ? {} : { max: req.max }) }, operator: req.operator };
}

/**
 * SetNodeLimits: `clear` drops the override; otherwise the fields set replace
 * the override's, the rest keep theirs. Validated whole before the one change;
 * returns its audit event (node.limits-set), so a refused call has none.
 */
export function applySetNodeLimits(req: SetNodeLimitsRequest, nodes: NodeRegistry): EventInit {
  const next = checkSetNodeLimits(req, nodes);
  const nodeId = req.nodeId;
  const previousOverride = nodes.limitsOverride(nodeId);
  const previousEffective = nodes.limitsOf(nodeId);
  nodes.setLimitsOverride(nodeId, next);
  const value = create(NodeLimitsSetSchema, {
    previousOverride: nodeLimitsToWire(previousOverride),
    override: nodeLimitsToWire(nodes.limitsOverride(nodeId)),
    previousEffective: nodeLimitsToWire(previousEffective, true),
    effective: nodeLimitsToWire(nodes.limitsOf(nodeId), true),
    cleared: req.clear,
    operator: req.operator,
  });
  return { nodeId, payload: { case: "nodeLimitsSet", value } };
}

/** SetNodeLimits' checks, whole: the override the node would have after it (empty = none). Changes nothing. */
export function checkSetNodeLimits(req: SetNodeLimitsRequest, nodes: Pick<NodeRegistry, "get" | "limitsOverride">): NodeLimits {
  const nodeId = checkId(req.nodeId, "node_id");
  const patch = nodeLimitsFromWire(req.limits, "limits");
  const empty = patch.maxReplicasPerModel === undefined && patch.memoryBudget === undefined;
  if (req.clear && !empty) throw invalidArgument("clear", "clears the whole override: send either clear or limits, not both");
  if (!req.clear && empty) throw invalidArgument("limits", "set max_replicas_per_model or a memory budget, or clear");
  checkOperator(req.operator);
  if (nodes.get(nodeId) === undefined) throw new WardenError(Code.NotFound, `node_id: node "${nodeId}" is not registered`);
  return req.clear ? {} : { ...nodes.limitsOverride(nodeId), ...patch };
}

/** ListModels' replica summary: one entry per configured model (a bounded set), with its load job when it has one. */
export function replicaSummaries(loader: Pick<Loader<BackendClientHandle>, "replicaStatuses" | "loadJob">, clock: Clock): ModelReplicasInit[] {
  const now = clock.now();
  return loader.replicaStatuses().map((s) => {
    const job = loader.loadJob(s.model);
    return { ...modelReplicasInit(s, now), ...(job === undefined ? {} : { loadJob: loadJobToWire(job, now) }) };
  });
}
