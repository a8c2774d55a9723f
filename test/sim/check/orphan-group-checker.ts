import type { Checker } from "./checker.js";

/**
 * Groups are exclusive per node, orphans included: a start is never sent to a
 * node where a live process without an agent record (an orphan — a backend
 * whose agent was killed between its spawn and its record, or lost its records)
 * that the node has reported to this coordinator belongs to a model sharing a
 * group with the one started. The orphan's model is the ground truth's (what
 * the process really serves), not the report's: an orphan reported without its
 * model counts for no group in Warden, and this is what catches it. Orphans the
 * node has not reported yet are not judged (Warden cannot know of them); those
 * with a record are judged by invariant 7 and HA 8.
 */
export function orphanGroupChecker(): Checker {
  return {
    name: "orphan-group",
    onStartSent(ctx, nodeId, model, incarnation) {
      const c = ctx.coord;
      if (c === undefined) return;
      const groups = c.loader.modelSpec(model)?.groups ?? [];
      if (groups.length === 0) return;
      const w = ctx.world;
      const agent = w.agents.get(nodeId);
      const reported = c.nodes.get(nodeId)?.orphans;
      if (agent === undefined || reported === undefined || reported.length === 0) return;
      const pids = new Set(reported.map((o) => o.pid));
      for (const p of w.truth.liveOn(nodeId)) {
        if (p.incarnation === incarnation || p.model === model || agent.hasRecord(p.incarnation) || !pids.has(p.pid)) continue;
        const other = c.loader.modelSpec(p.model)?.groups ?? [];
        if (other.some((g) => groups.includes(g))) {
          const said = reported.find((o) => o.pid === p.pid)?.model ?? "";
          ctx.report("orphan group", `start of ${model} ${incarnation} on ${nodeId} beside orphan pid ${String(p.pid)} of ${p.model} (same group; reported as model "${said}")`);
          return;
        }
      }
    },
  };
}
