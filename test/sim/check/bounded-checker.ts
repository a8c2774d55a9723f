import { NodeTable } from "@warden/cluster";
import type { Checker } from "./checker.js";

/** Invariant 13: every collection keyed by outside input stays within its cap. */
export function boundedChecker(): Checker {
  let n = 0;
  return {
    name: "bounded",
    afterStep(ctx) {
      if (++n % 64 !== 0) return;
      const c = ctx.coord;
      if (c === undefined) return;
      const st = c.outbox.stats();
      if (st.depth > st.capacity) ctx.report("13 bounded state", `outbox depth ${String(st.depth)} > capacity ${String(st.capacity)}`);
      for (const node of c.nodes.list()) {
        if (node.fences.size > NodeTable.maxFencesPerNode) ctx.report("13 bounded state", `node ${node.nodeId} holds ${String(node.fences.size)} fences`);
      }
      if (c.loader.heldInstances().length > ctx.world.truth.minted.size) ctx.report("13 bounded state", "loader holds more instances than were ever minted");
    },
  };
}
