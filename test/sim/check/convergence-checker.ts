import type { Checker } from "./checker.js";

/**
 * Invariant 9 at quiescence (faults stopped, clients stopped, several
 * reconciliation intervals later): Warden's instances equal the processes
 * really running, with no leftover, no orphan, nothing in flight and an
 * empty outbox.
 */
export function convergenceChecker(): Checker {
  return {
    name: "convergence",
    atQuiescence(ctx) {
      const c = ctx.coord;
      if (c === undefined) {
        ctx.report("9 convergence", "no coordinator is up at quiescence");
        return;
      }
      const w = ctx.world;
      const live = new Map(w.truth.live().map((p) => [p.incarnation, p]));
      const held = new Map(c.loader.heldInstances().map((h) => [h.incarnation, h]));
      for (const [inc, p] of live) {
        if (!held.has(inc)) ctx.report("9 convergence", `${p.model} ${inc} (pid ${String(p.pid)}, ${p.phase}) runs on ${p.nodeId} but Warden does not hold it`);
      }
      for (const [inc, h] of held) {
        if (!live.has(inc)) ctx.report("9 convergence", `Warden holds ${h.model} ${inc} on ${h.nodeId} (${h.phase}), which is not running`);
      }
      const leftovers = c.loader.leftoverList();
      if (leftovers.length > 0) ctx.report("9 convergence", `${String(leftovers.length)} leftovers remain, e.g. ${leftovers[0]?.incarnation ?? ""}`);
      for (const n of c.nodes.list()) if (n.orphans.length > 0) ctx.report("9 convergence", `node ${n.nodeId} still reports ${String(n.orphans.length)} orphans`);
      for (const h of held.values()) {
        const v = c.loader.core.instance(h.incarnation);
        if (v !== undefined && v.inFlight !== 0) ctx.report("9 convergence", `${h.incarnation} still has inFlight ${String(v.inFlight)}`);
      }
      const st = c.outbox.stats();
      if (st.depth !== 0) ctx.report("9 convergence", `outbox still holds ${String(st.depth)} events`);
    },
  };
}
