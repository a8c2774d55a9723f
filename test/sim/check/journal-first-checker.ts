import type { Checker } from "./checker.js";

/**
 * Invariant 10 (the outbox's order): an audit event reaches the stream only
 * after its journal record is durable, so a crash can never leave a published
 * event the restarted coordinator does not know (no `recovered`, no replay).
 * Checked on every event the stream stores, in the step it is stored.
 */
export function journalFirstChecker(): Checker {
  let seen = 0;
  return {
    name: "journal-first",
    afterStep(ctx) {
      const stored = ctx.world.nats.stored;
      if (stored.length === seen) return;
      const durable = ctx.world.disk.durableEventIds();
      for (; seen < stored.length; seen++) {
        const e = stored[seen];
        if (e !== undefined && !durable.has(e.id)) {
          ctx.report("10 audit completeness", `${e.payload.case ?? "?"} ${e.id} for ${e.incarnation} reached the stream before its journal record was durable`);
          seen = stored.length;
          return;
        }
      }
    },
  };
}
