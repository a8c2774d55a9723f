import type { Checker } from "./checker.js";

/**
 * Invariants 4 and 7 where the request checker does not look:
 * (a) a ready instance Warden routes to always has request state at its
 *     address — cleared state makes it invisible to the idle and busy checks
 *     for good (a settle that clears an address a replacement now owns, a
 *     tick that clears a pending address);
 * (b) while an instance is pending eviction its request state stays live
 *     (DESIGN §3.2 step 2): the watchdog's in-flight count still equals the
 *     calls really open on it, unless another incarnation's calls are open
 *     on the same (recycled) address, or another incarnation is (or was,
 *     after this one's process died) registered there: the agent recycles a port only once its process exited, and the
 *     replacement starts with fresh request state (a predecessor's calls are
 *     not the replacement's, seed 18428; settle row 1 then touches nothing).
 */
export function requestStateChecker(): Checker {
  return {
    name: "request-state",
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined) return;
      const truth = ctx.world.truth;
      let open: Map<string, number> | undefined;
      let openAt: Map<string, number> | undefined;
      const recycled = (address: string, incarnation: string): boolean => {
        const owner = c.loader.core.instanceAt(address);
        if (owner !== undefined && owner.incarnation !== incarnation) return true;
        // The replacement may be gone again already (its load failed, it was stopped): the
        // fresh state it started with stays. Only asked on a mismatch, so the scan is rare.
        const mineP = truth.byIncarnation.get(incarnation);
        if (mineP?.diedAtMs === undefined) return false;
        for (const p of truth.processes.values()) if (p.address === address && p.incarnation !== incarnation && p.spawnedAtMs >= mineP.spawnedAtMs) return true;
        return false;
      };
      for (const h of c.loader.heldInstances()) {
        if (h.address === undefined || truth.forgotten.has(h.incarnation)) continue;
        const v = c.loader.core.instance(h.incarnation);
        if (v === undefined) continue;
        if (v.state === "ready" && v.pendingEviction === undefined && h.phase === "ready") {
          if (c.loader.core.requestState(h.address) === undefined) {
            ctx.report("7 eviction selection", `ready ${h.model} ${h.incarnation} at ${h.address} has no request state: idle and busy checks can never see it`);
            return;
          }
          continue;
        }
        if (v.pendingEviction === undefined) continue;
        if (open === undefined || openAt === undefined) {
          open = new Map();
          openAt = new Map();
          for (const r of truth.openRequests.values()) {
            open.set(r.incarnation, (open.get(r.incarnation) ?? 0) + 1);
            openAt.set(r.address, (openAt.get(r.address) ?? 0) + 1);
          }
        }
        const mine = open.get(h.incarnation) ?? 0;
        if (v.inFlight !== mine && (openAt.get(h.address) ?? 0) === mine && !recycled(h.address, h.incarnation)) {
          ctx.report("4 request conservation", `pending ${h.model} ${h.incarnation}: watchdog inFlight ${String(v.inFlight)}, really open ${String(mine)} (request state must stay live during the stop)`);
          return;
        }
      }
    },
  };
}
