import type { Checker } from "./checker.js";

/**
 * Invariant 4: for each registered instance, the watchdog's in-flight count is
 * never negative and equals the calls really open on it (leases granted and
 * not completed), unless an older incarnation's calls are still open on the
 * same (recycled) address.
 */
export function requestChecker(): Checker {
  return {
    name: "requests",
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined) return;
      const open = new Map<string, number>();
      const openAt = new Map<string, number>();
      for (const r of ctx.world.truth.openRequests.values()) {
        open.set(r.incarnation, (open.get(r.incarnation) ?? 0) + 1);
        openAt.set(r.address, (openAt.get(r.address) ?? 0) + 1);
      }
      for (const h of c.loader.heldInstances()) {
        if (h.address === undefined) continue;
        const v = c.loader.core.instance(h.incarnation);
        if (v === undefined || ctx.world.truth.forgotten.has(h.incarnation)) continue;
        if (v.inFlight < 0) {
          ctx.report("4 request conservation", `inFlight ${String(v.inFlight)} < 0 on ${h.incarnation}`);
          return;
        }
        const mine = open.get(h.incarnation) ?? 0;
        if (v.inFlight !== mine && (openAt.get(h.address) ?? 0) === mine && v.pendingEviction === undefined && v.state === "ready") {
          ctx.report("4 request conservation", `${h.model} ${h.incarnation}: watchdog inFlight ${String(v.inFlight)}, really open ${String(mine)}`);
          return;
        }
      }
    },
  };
}
