import type { Loader } from "@warden/loader";
import type { Checker } from "./checker.js";

/**
 * Invariant 1 across a coordinator restart (DESIGN §3.3, F8): every open stop
 * intent the journal replays whose process still runs is accounted — a
 * leftover on its node — as soon as the loader exists, whether or not its
 * node has registered yet. Checked once per generation, in the step its
 * loader was built (restoreStopIntents runs in that same turn).
 */
export function restoredIntentsChecker(): Checker {
  let checkedGeneration = -1;
  return {
    name: "restored-intents",
    afterStep(ctx) {
      const c = ctx.coord;
      if (c === undefined || c.generation === checkedGeneration) return;
      if ((c as { loader: Loader | undefined }).loader === undefined) return;
      checkedGeneration = c.generation;
      for (const i of c.outbox.openStopIntents()) {
        const p = ctx.world.truth.byIncarnation.get(i.incarnation);
        if (p === undefined || p.phase === "dead") continue;
        if (!c.loader.knows(i.incarnation)) {
          ctx.report("1 no amnesia", `generation ${String(c.generation)} replayed the open stop intent of ${i.model} ${i.incarnation} on ${i.nodeId} (pid ${String(p.pid)}, running) but does not account it`);
          return;
        }
      }
    },
  };
}
