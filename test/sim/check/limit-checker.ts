import type { Checker } from "./checker.js";

/**
 * Invariants 2 and 7 (admission, DESIGN §3.4 item 3): a start is sent to a
 * node only when what Warden itself accounts there and really runs — ready,
 * loading, freed, pending eviction, leftovers — leaves room under the
 * per-node limit. A node full of pinned instances may go over (LocalAI's
 * pins-only rule); processes Warden does not account (not reported yet) are
 * not counted, so the check never blames Warden for what it cannot know.
 */
export function limitChecker(): Checker {
  return {
    name: "limit",
    onStartSent(ctx, nodeId, _model, incarnation) {
      const c = ctx.coord;
      if (c === undefined) return;
      // Only a start this generation's loader made (it holds the instance before it sends the start).
      // (A crashed generation's load can still send its start: seed 1 at 10 min, reported to the harness.)
      if (c.loader.heldInstance(incarnation) === undefined) return;
      const limit = c.loader.getPolicy().limitPerNode;
      if (limit <= 0) return;
      const leftovers = new Set(c.loader.leftoverList().map((l) => l.incarnation));
      let occupied = 0;
      let pinned = false;
      const seen: string[] = [];
      for (const p of ctx.world.truth.live()) {
        if (p.nodeId !== nodeId || p.incarnation === incarnation) continue;
        const accounted = c.loader.core.instance(p.incarnation) !== undefined || c.loader.heldInstance(p.incarnation) !== undefined || leftovers.has(p.incarnation);
        if (!accounted) continue;
        occupied++;
        seen.push(`${p.model} ${p.incarnation} ${c.loader.core.instance(p.incarnation)?.state ?? (leftovers.has(p.incarnation) ? "leftover" : "held")}`);
        if (c.loader.core.isPinned(p.model)) pinned = true;
      }
      if (occupied + 1 > limit && !pinned) {
        ctx.report("2 memory accounting", `start of ${incarnation} on ${nodeId} with ${String(occupied)} accounted live instances there (limit ${String(limit)}): ${seen.join(", ")}; the new one is ${c.loader.core.instance(incarnation)?.state ?? "not reserved"}`);
      }
    },
  };
}
