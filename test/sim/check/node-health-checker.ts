import type { Checker } from "./checker.js";

/**
 * Invariant 11: a node is declared lost by timeout only after it really was
 * silent (no heartbeat reached the coordinator) for grace + lost-after, and
 * never while most nodes are unreachable (the full-disruption rule).
 */
export function nodeHealthChecker(): Checker {
  const lastHeard = new Map<string, number>();
  return {
    name: "node-health",
    afterHeartbeat(ctx, hb, _sentAtMs, applied) {
      if (applied) lastHeard.set(hb.nodeId, ctx.world.clock.now());
    },
    onEvent(ctx, e) {
      const w = ctx.world;
      if (e.payload.case === "unreachabilityPaused" && e.payload.value.paused) w.coverage.hit("unreachability.paused");
      if (e.payload.case === "nodeUnreachable") w.coverage.hit("node.unreachable");
      if (e.payload.case !== "nodeLost") return;
      w.coverage.hit("node.lost");
      w.truth.declaredLost.add(e.nodeId);
      if (e.payload.value.byOperator) return;
      const c = ctx.coord;
      if (c === undefined) return;
      const now = w.clock.now();
      const heard = lastHeard.get(e.nodeId);
      if (heard !== undefined && now - heard < w.opts.nodeGraceMs + w.opts.nodeLostAfterMs) ctx.report("11 disconnected nodes", `${e.nodeId} declared lost ${String(now - heard)}ms after its last heartbeat`);
      const nodes = c.nodes.list().filter((n) => !n.embedded);
      const silent = nodes.filter((n) => now - (lastHeard.get(n.nodeId) ?? 0) > w.opts.nodeGraceMs + 1_000).length;
      if (silent >= 3 && silent >= 0.55 * c.nodes.list().length + 1) ctx.report("11 disconnected nodes", `${e.nodeId} declared lost while ${String(silent)} of ${String(c.nodes.list().length)} nodes are silent`);
    },
  };
}
