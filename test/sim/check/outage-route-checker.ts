import type { Checker } from "./checker.js";

/**
 * Serving through an agent outage: a call goes to an instance on a node that
 * is not ready (its agent unreachable) only while the coordinator's own
 * health probe of the backend says it serves — never to one whose probe
 * failed, nor to one that is not probed at all. (Stopping instances: the
 * route-pending and routing checkers.) A probe answer in the lease's own
 * step is not counted: the lease may have been granted just before it.
 */
export function outageRouteChecker(): Checker {
  return {
    name: "outage-route",
    onLease(ctx, lease) {
      const c = ctx.coord;
      if (c?.outage === undefined) return;
      const n = c.nodes.get(lease.nodeId);
      if (n === undefined || n.state === "ready") return;
      const probe = c.outage.probes.stateOf(lease.incarnation);
      const now = ctx.world.clock.now();
      if (probe === undefined) {
        if ((n.unreachableSinceMs ?? -Infinity) < now) ctx.report("outage routing", `new call routed to ${lease.incarnation} on ${n.state} node ${lease.nodeId}, which no probe vouches for`);
      } else if (probe.t === "failed" && probe.sinceMs < now) {
        ctx.report("outage routing", `new call routed to ${lease.incarnation} on unreachable node ${lease.nodeId} although its health probe failed at ${String(Math.round(probe.sinceMs))}ms (${probe.reason})`);
      }
    },
  };
}
