import type { Checker } from "./checker.js";

/**
 * Invariants 7 (single-flight) and 12 (StopBackend names only incarnations
 * the coordinator minted, at the address that incarnation really has).
 */
export function stopChecker(): Checker {
  return {
    name: "stops",
    onStopSent(ctx, req, nodeId) {
      const w = ctx.world;
      if (ctx.stopsInFlight.has(req.incarnation)) ctx.report("7 single-flight", `second StopBackend for ${req.incarnation} on ${nodeId} while one is in flight`);
      if (!w.truth.minted.has(req.incarnation)) ctx.report("12 idempotent agent commands", `StopBackend names ${req.incarnation}, which no coordinator minted`);
      const p = w.truth.byIncarnation.get(req.incarnation);
      if (p !== undefined && (p.address !== req.address || p.nodeId !== nodeId)) ctx.report("12 idempotent agent commands", `StopBackend for ${req.incarnation} at ${nodeId}/${req.address}, but it runs at ${p.nodeId}/${p.address}`);
      w.coverage.hit("stop.sent");
    },
  };
}
