import type { Checker } from "./checker.js";

/**
 * Invariant 4: for each registered instance, the watchdog's in-flight count is
 * never negative and equals the calls really open on it (leases granted and
 * not completed), unless an older incarnation's calls are still open on the
 * same (recycled) address. Runs after every step; the ground truth keeps its
 * open-call counts per incarnation and address as calls open and close, so a
 * step costs one comparison per held instance, and the instance view (with
 * its pending eviction and state) is built only when the counts differ.
 */
export function requestChecker(): Checker {
  return {
    name: "requests",
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined) return;
      const open = ctx.world.truth.openRequests;
      const forgotten = ctx.world.truth.forgotten;
      for (const h of c.loader.heldInstances()) {
        if (h.address === undefined) continue;
        const n = c.loader.core.inFlight(h.address);
        const mine = open.onIncarnation(h.incarnation);
        if (n === mine && n >= 0) continue;
        const v = c.loader.core.instance(h.incarnation);
        if (v === undefined || forgotten.has(h.incarnation)) continue;
        if (v.inFlight < 0) {
          ctx.report("4 request conservation", `inFlight ${String(v.inFlight)} < 0 on ${h.incarnation}`);
          return;
        }
        if (v.inFlight !== mine && open.atAddress(h.address) === mine && v.pendingEviction === undefined && v.state === "ready") {
          ctx.report("4 request conservation", `${h.model} ${h.incarnation}: watchdog inFlight ${String(v.inFlight)}, really open ${String(mine)}`);
          return;
        }
      }
    },
  };
}
