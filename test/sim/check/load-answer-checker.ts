import type { Checker } from "./checker.js";

/** A refusal for room a node's instances hold (the watchdog's per-node limit or a group conflict). */
const roomRefusal = /(limit|group conflict) on node "[^"]*": /;

/**
 * "Not now" is answered as not now: a load refused because a node's room is
 * held (busy, loading, pinned or stopping instances, victims stopped and more
 * needed) waited loadWait and answers UNAVAILABLE, never FAILED_PRECONDITION
 * (the CLI's exit 7, "never": a caller would stop retrying a load that would
 * fit once those instances finish). Judged on every load.failed at its decision.
 */
export function loadAnswerChecker(): Checker {
  return {
    name: "load-answer",
    onLoaderEvent(ctx, e) {
      if (e.type !== "load.failed" || !roomRefusal.test(e.reason)) return;
      if (e.code === "FAILED_PRECONDITION") ctx.report("load answer: room is not now", `model ${e.model}: load ${e.loadIncarnation} refused FAILED_PRECONDITION for room a node's instances hold: ${e.reason}`);
      else ctx.world.coverage.hit(`load.room-refused-${e.code.toLowerCase()}`);
    },
  };
}
