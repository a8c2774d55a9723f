import { EvictionFailedOutcome } from "@warden/proto";
import type { Checker, CheckContext } from "./checker.js";

/**
 * Invariant 8 (no phantoms): (a) every instance the watchdog holds as
 * registered (loading, ready, freed) is held by the loader — a registration
 * nothing holds is never routed, never reconciled and never reaped; (b) a
 * remote placement whose StopBackend was sent and failed settles as a
 * leftover, never registered again (DESIGN §3.3: the local half is dropped
 * before the failure is reported). Only the embedded node's (local) stops
 * may register an instance again after StopBackend failed.
 */
export function phantomChecker(): Checker {
  /** Incarnations whose current eviction has sent a StopBackend. */
  const stopSent = new Set<string>();
  const embedded = (ctx: CheckContext, nodeId: string): boolean => ctx.world.opts.nodes.find((n) => n.nodeId === nodeId)?.embedded === true;
  return {
    name: "phantom",
    onStopSent(_ctx, req) {
      stopSent.add(req.incarnation);
    },
    onEvent(ctx, e) {
      const p = e.payload;
      if (p.case === "evictionStarted") stopSent.delete(e.incarnation);
      if (p.case !== "evictionFailed") return;
      const sent = stopSent.delete(e.incarnation);
      if (sent && p.value.outcome === EvictionFailedOutcome.REGISTERED_AGAIN && !embedded(ctx, e.nodeId)) {
        ctx.report("8 no phantoms", `remote ${e.incarnation} on ${e.nodeId} registered again after its StopBackend failed (${p.value.error}); it must be a leftover`);
      }
    },
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined) return;
      for (const v of c.loader.core.instances()) {
        if (v.pendingEviction !== undefined || v.state === "reserved") continue;
        // An operator's forget is audited and exempt (as from the amnesia checks): forgetting a
        // start in flight leaves its later registration unheld (seed 18, reported, not fixed here).
        if (ctx.world.truth.forgotten.has(v.incarnation)) continue;
        if (c.loader.heldInstance(v.incarnation) === undefined) {
          ctx.report("8 no phantoms", `the watchdog holds ${v.model} ${v.incarnation} on ${v.nodeId} as ${v.state}, which the loader does not hold`);
          return;
        }
      }
    },
  };
}
