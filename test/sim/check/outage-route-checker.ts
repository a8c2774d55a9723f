import { simMaxProbesInFlight } from "../coordinator/sim-coordinator.js";
import type { Checker } from "./checker.js";

/**
 * Serving through an agent outage: a call goes to an instance on a node that
 * is not ready (its agent unreachable) only while the coordinator's own
 * health probe of the backend says it serves — never to one whose probe
 * failed, nor to one that is not probed at all. (Stopping instances: the
 * route-pending and routing checkers.) A probe answer in the lease's own
 * step is not counted: the lease may have been granted just before it. And
 * never more probes in flight than the bound: the rest wait in due order.
 */
export function outageRouteChecker(): Checker {
  return {
    name: "outage-route",
    afterStep(ctx) {
      const n = ctx.coord?.outage?.probesInFlight ?? 0;
      // The bound reached: probes due beyond it wait their turn (the queue is exercised).
      if (n === simMaxProbesInFlight) ctx.world.coverage.hit("outage.probes-at-bound");
      if (n > simMaxProbesInFlight) ctx.report("outage probes", `${String(n)} health probes in flight, over the bound of ${String(simMaxProbesInFlight)}`);
    },
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
