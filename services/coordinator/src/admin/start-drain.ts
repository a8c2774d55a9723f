import type { NodeRecord } from "../nodes/node-registry.js";
import type { AdminDeps } from "./admin-service.js";

/**
 * DrainNode's work on a node already marked draining: node.drain-started,
 * moves and stops, then node.drained, both naming who asked (also resumed
 * after a restart or a takeover, `resumed`).
 */
export function startDrain(d: Pick<AdminDeps, "loader" | "hub">, n: NodeRecord, o: { readonly force: boolean; readonly actor?: string | undefined; readonly resumed?: boolean }): void {
  const by = o.actor === undefined ? {} : { actor: o.actor };
  void d.hub.publish({ nodeId: n.nodeId, ...by, payload: { case: "nodeDrainStarted", value: { $typeName: "warden.v1.NodeDrainStarted", force: o.force, resumed: o.resumed === true } } });
  // Replicas keeping a model at min move first (a replacement elsewhere, ready before the stop).
  void d.loader.drainNode(n.nodeId, { force: o.force, stillDraining: () => n.draining }).then(() => {
    void d.hub.publish({ nodeId: n.nodeId, ...by, payload: { case: "nodeDrained", value: { $typeName: "warden.v1.NodeDrained" } } });
  });
}
