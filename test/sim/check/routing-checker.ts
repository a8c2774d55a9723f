import type { Checker } from "./checker.js";

/**
 * Invariants 3 and 6: a call is routed only to a process that really became
 * ready, and never to one whose StopBackend is in flight (pending eviction,
 * stopping). A process that died since it was ready is fine: Warden cannot
 * know before the agent says so.
 */
export function routingChecker(): Checker {
  return {
    name: "routing",
    onLease(ctx, lease) {
      const p = ctx.world.truth.byIncarnation.get(lease.incarnation);
      if (p === undefined) {
        ctx.report("3 routability", `lease on ${lease.incarnation}, which no agent ever started`);
        return;
      }
      if (p.readyAtMs === undefined) ctx.report("3 routability", `lease on ${lease.incarnation} (${p.model} on ${p.nodeId}) before its backend was ever ready`);
      else if (p.address !== lease.address) ctx.report("3 routability", `lease on ${lease.incarnation} at ${lease.address}, but it runs at ${p.address}`);
      else if (ctx.stopsInFlight.has(lease.incarnation)) ctx.report("6 no dropped new requests", `new call routed to ${lease.incarnation} while its StopBackend is in flight`);
    },
  };
}
