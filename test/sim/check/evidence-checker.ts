import type { Checker, CheckContext } from "./checker.js";

/**
 * Invariants 1 and 5 against the ground truth: an instance leaves Warden's
 * accounting as stopped only on positive evidence — when Warden says
 * `eviction.stopped` or `leftover.reaped`, the process really is dead (or the
 * agent no longer has its record: then it is an orphan, accounted by pid).
 * And once confirmed gone, an incarnation is never held or registered again.
 */
export function evidenceChecker(): Checker {
  const confirmed: string[] = [];
  const confirmedSet = new Set<string>();
  // Held instances are walked (a handful) rather than looked up per confirmed stop (up to 256).
  const check = (ctx: CheckContext): void => {
    const c = ctx.coord;
    if (c === undefined || confirmedSet.size === 0) return;
    for (const h of c.loader.heldInstances()) {
      if (confirmedSet.has(h.incarnation)) {
        ctx.report("5 no resurrection", `incarnation ${h.incarnation} was confirmed gone but is held/registered again`);
        return;
      }
    }
    for (const inc of confirmed) {
      if (c.loader.core.instance(inc) !== undefined) {
        ctx.report("5 no resurrection", `incarnation ${inc} was confirmed gone but is held/registered again`);
        return;
      }
    }
  };
  return {
    name: "evidence",
    onEvent(ctx, e) {
      const p = e.payload;
      if (p.case !== "evictionStopped" && p.case !== "leftoverReaped") return;
      if (e.incarnation.startsWith("pid:")) return;
      const w = ctx.world;
      const truth = w.truth.byIncarnation.get(e.incarnation);
      if (truth !== undefined && truth.phase !== "dead" && w.agents.get(truth.nodeId)?.hasRecord(e.incarnation) === true) {
        ctx.report("1 no amnesia", `${p.case} for ${e.incarnation} on ${e.nodeId} while its process ${String(truth.pid)} is alive and recorded`);
        return;
      }
      if (p.case === "evictionStopped") w.coverage.hit(p.value.alreadyGone ? "eviction.already-gone" : "eviction.stopped");
      else w.coverage.hit("leftover.reaped");
      if (truth !== undefined && truth.phase === "dead" && !confirmedSet.has(e.incarnation)) {
        confirmedSet.add(e.incarnation);
        confirmed.push(e.incarnation);
        if (confirmed.length > 256) confirmedSet.delete(confirmed.shift() ?? "");
      }
    },
    afterStep(ctx, label) {
      if (label === "heartbeat" || label === "register" || label === "start.event" || label === "exit" || label === "heartbeat.stale") check(ctx);
    },
    atQuiescence: check,
  };
}
