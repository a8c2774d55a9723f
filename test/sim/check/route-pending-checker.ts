import type { Checker } from "./checker.js";

/**
 * Invariant 6 (no dropped new requests): routing never sends a new call to an
 * instance pending eviction — from the moment it is detached, not only while
 * its StopBackend is in flight (routing-checker covers that part against the
 * ground truth). A detach in the lease's own step is not counted: the lease
 * may have been granted just before it in the same turn.
 */
export function routePendingChecker(): Checker {
  return {
    name: "route-pending",
    onLease(ctx, lease) {
      const c = ctx.coord;
      if (c === undefined) return;
      const pend = c.loader.core.instance(lease.incarnation)?.pendingEviction;
      if (pend !== undefined && pend.sinceMs < ctx.world.clock.now()) {
        ctx.report("6 no dropped new requests", `new call routed to ${lease.incarnation}, pending eviction (${pend.reason}) since ${String(Math.round(pend.sinceMs))}ms`);
      }
    },
  };
}
