import { InstanceState, NodeState, Placement } from "@warden/proto";
import { Code, WardenError, type Clock } from "@warden/common";
import type { SettingsChange } from "../ha/durable-settings.js";
import type { EventHub } from "./event-hub.js";
import { nodeEventInit } from "../nodes/node-audit-events.js";
import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "../routing/backend-connector.js";
import type { NodeRegistry } from "../nodes/node-registry.js";
import type { KnownAtStartState, NodesKnownAtStart } from "../nodes/nodes-known-at-start.js";
import type { TakeoverSettings } from "../ha/takeover-settings.js";
import { nodeLimitFields } from "./replica-admin.js";
import { lostPlaceholder, type ModelInstanceInit, type NodeInit } from "./admin-messages.js";

// How ListNodes and GetNode show a node known from before the coordinator's
// restart that has not registered since (nodes-known-at-start.ts).

interface KnownDeps {
  readonly loader: Loader<BackendClientHandle>;
  readonly nodes: NodeRegistry;
  readonly takeover?: TakeoverSettings | undefined;
  readonly knownAtStart?: NodesKnownAtStart | undefined;
}

/** The journal's instances on `nodeId` that its node has not confirmed since the restart. */
export function unconfirmedOn(d: Pick<KnownDeps, "loader">, nodeId: string): ModelInstanceInit[] {
  return d.loader.journalReplicas
    .list()
    .filter((u) => u.nodeId === nodeId)
    .map((u) => ({ model: u.model, nodeId: u.nodeId, address: u.address, incarnation: u.incarnation, placement: Placement.REMOTE_ONLY, state: InstanceState.UNCONFIRMED, backend: d.loader.modelSpec(u.model)?.backend ?? "", nodeState: NodeState.NOT_REPORTED }));
}

/** A node not registered since the restart: what the coordinator knows of it (a kept drain, limits, the journal's instances). */
export function knownNodeView(d: KnownDeps, nodeId: string, state: KnownAtStartState, instanceCount: number): NodeInit {
  const unconfirmed = state === "lost" ? 0 : unconfirmedOn(d, nodeId).length;
  return {
    ...nodeLimitFields(d.nodes, nodeId),
    nodeId,
    state: state === "lost" ? NodeState.LOST : NodeState.NOT_REPORTED,
    draining: d.takeover?.drainWaiting(nodeId) === true,
    instanceCount: instanceCount + unconfirmed,
  };
}

/**
 * DeclareNodeLost of a node known from before the restart that has not
 * registered since (undefined for any other node): written like any
 * declaration, then its journaled instances stop counting at once, it is
 * listed lost, and node.lost is audited with the actor. The declaration holds
 * until the node is heard from again, as for a registered node.
 */
export function declareUnregisteredLost(d: KnownDeps & { readonly clock: Clock; readonly hub: EventHub }, nodeId: string, reason: string, actor: string | undefined): SettingsChange<{ node: NodeInit; wasAlreadyLost: boolean }> | undefined {
  const known = d.knownAtStart;
  const takeover = d.takeover;
  if (known?.stateOf(nodeId) === undefined || takeover === undefined) return undefined;
  const value = { reason, atWallMs: d.clock.wallNow() };
  return {
    t: "put",
    value,
    apply: () => {
      // Registered during the write: its heartbeats say it is alive (the entry is removed behind this call).
      if (d.nodes.get(nodeId) !== undefined) {
        takeover.nodeHeard(nodeId);
        throw new WardenError(Code.FailedPrecondition, `node_id: node "${nodeId}" registered meanwhile: only an unreachable node can be declared lost`);
      }
      known.heard(nodeId);
      takeover.lostUnregistered.set(nodeId, value);
      d.loader.onNodeLost(nodeId);
      const init = nodeEventInit(nodeId, "lost-by-operator", {}, reason);
      if (init !== undefined) void d.hub.publish(actor === undefined ? init : { ...init, actor });
      return { node: lostPlaceholder(nodeId), wasAlreadyLost: false };
    },
  };
}
