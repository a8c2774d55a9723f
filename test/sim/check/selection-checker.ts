import type { Checker } from "./checker.js";

/**
 * Invariant 7 against the real open calls: idle evictions only after T_idle
 * without calls on the monotonic clock; policy evictions (group, LRU, memory)
 * of a busy instance only with force-eviction-when-busy; busy-killer only when
 * the oldest open call is older than T_busy (calls open when an operator
 * forgot the instance are not counted: the forget reset them). Groups are exclusive per node:
 * a start is never sent while a live instance Warden knows on that node
 * shares a group with it.
 */
export function selectionChecker(): Checker {
  const lastActivity = new Map<string, number>();
  return {
    name: "selection",
    onLease(ctx, lease) {
      lastActivity.set(lease.incarnation, ctx.world.clock.now());
    },
    // Judged when the loader emits eviction.started (the decision), not when the audit event is
    // delivered after the journal: a stall or a policy change in between changes neither the
    // calls the decision saw nor the policy it used.
    onLoaderEvent(ctx, e) {
      if (e.type !== "eviction.started" || e.incarnation.startsWith("pid:")) return;
      const c = ctx.coord;
      if (c === undefined) return;
      const w = ctx.world;
      const now = w.clock.now();
      // An operator's forget drops Warden's count of the calls open then (audited);
      // a re-adopted incarnation counts only the calls routed to it afterwards —
      // by request id: those may start in the forget's own millisecond (seed 28758).
      const forgotAfter = w.truth.forgottenAfterRequestId.get(e.incarnation) ?? 0;
      const open = [...w.truth.openRequests.values()].filter((r) => r.incarnation === e.incarnation && r.id > forgotAfter);
      const policy = c.loader.getPolicy();
      if (e.reason === "idle") {
        const since = lastActivity.get(e.incarnation);
        if (open.length > 0) ctx.report("7 eviction selection", `idle eviction of ${e.incarnation} with ${String(open.length)} open calls`);
        else if (since !== undefined && now - since < policy.idleTimeoutMs - 1_000) ctx.report("7 eviction selection", `idle eviction of ${e.incarnation} ${String(now - since)}ms after its last call (T_idle ${String(policy.idleTimeoutMs)})`);
      } else if (e.reason === "busy") {
        const oldest = Math.min(...open.map((r) => r.startedAtMs));
        if (open.length > 0 && now - oldest < policy.busyTimeoutMs - 1_000) ctx.report("7 eviction selection", `busy eviction of ${e.incarnation}: oldest call only ${String(now - oldest)}ms old`);
      } else if ((e.reason === "lru" || e.reason === "group" || e.reason === "memory") && !e.force && open.length > 0 && !policy.forceEvictionWhenBusy) {
        ctx.report("7 eviction selection", `${e.reason.toUpperCase()} eviction of busy ${e.incarnation} (${String(open.length)} open calls) without force`);
      }
    },
    onStartSent(ctx, nodeId, model, incarnation) {
      const c = ctx.coord;
      if (c === undefined) return;
      const groups = c.loader.modelSpec(model)?.groups ?? [];
      if (groups.length === 0) return;
      for (const p of ctx.world.truth.live()) {
        if (p.nodeId !== nodeId || p.incarnation === incarnation || p.model === model) continue;
        if (!c.loader.knows(p.incarnation) || c.loader.isGone(p.incarnation)) continue;
        const other = c.loader.modelSpec(p.model)?.groups ?? [];
        if (other.some((g) => groups.includes(g))) {
          ctx.report("7 eviction selection", `start of ${model} on ${nodeId} while ${p.model} ${p.incarnation} (same group) still runs there`);
          return;
        }
      }
    },
  };
}
