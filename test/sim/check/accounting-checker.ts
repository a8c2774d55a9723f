import { BackendState } from "@warden/proto";
import type { Checker } from "./checker.js";

/**
 * Invariants 1, 2 and 15 after every applied inventory: each process that was
 * live and recorded by the agent when the inventory was taken, and is still
 * live, is accounted by Warden — held, a leftover, registered, in the node's
 * stored inventory, or an orphan by pid — never forgotten or fenced away
 * (memory accounting never below reality). Every stored inventory entry is a
 * process that really exists on that node (no report on another node's instances).
 */
export function accountingChecker(): Checker {
  return {
    name: "accounting",
    afterHeartbeat(ctx, hb, sentAtMs, applied) {
      const c = ctx.coord;
      if (c === undefined || !applied) return;
      const w = ctx.world;
      const n = c.nodes.get(hb.nodeId);
      if (n === undefined || n.state === "lost") return;
      const stored = new Set((n.inventory ?? []).map((e) => e.incarnation));
      const orphanPids = new Set(n.orphans.map((o) => o.pid));
      for (const e of w.reportedBackends(hb)) {
        if (e.state === BackendState.EXITED) continue;
        const p = w.truth.byIncarnation.get(e.incarnation);
        if (p === undefined || p.phase === "dead" || p.spawnedAtMs > sentAtMs || w.truth.forgotten.has(e.incarnation)) continue;
        const accounted = (c.loader.knows(e.incarnation) && !c.loader.isGone(e.incarnation)) || stored.has(e.incarnation) || orphanPids.has(p.pid);
        if (!accounted) ctx.report("1 no amnesia", `live ${e.model} ${e.incarnation} on ${hb.nodeId} (pid ${String(p.pid)}) is in the applied inventory but Warden no longer accounts it`);
      }
      for (const e of n.inventory ?? []) {
        const p = w.truth.byIncarnation.get(e.incarnation);
        if (p !== undefined && p.nodeId !== hb.nodeId) ctx.report("15 node-scoped reports", `node ${hb.nodeId}'s inventory holds ${e.incarnation}, which runs on ${p.nodeId}`);
      }
    },
  };
}
