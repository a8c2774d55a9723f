import type { Checker } from "./checker.js";

/**
 * Admission gates (models with `admission:`): never more calls in flight
 * through a gate than its capacity, and a call let in from the queue never
 * passes a waiting call of a higher class — sheddable never goes before
 * critical. Judged at the moment the queue chooses, in the same turn.
 */
export function admissionChecker(): Checker {
  return {
    name: "admission",
    onAdmission(ctx, o) {
      if (o.inFlight > o.capacity) ctx.report("admission capacity", `model ${o.model}: ${String(o.inFlight)} calls in flight through its gate, capacity ${String(o.capacity)}`);
      if (o.fromQueue && o.waitingAbove > 0) ctx.report("admission class order", `model ${o.model}: a ${o.cls} call was let in while ${String(o.waitingAbove)} calls of a higher class waited`);
      ctx.world.coverage.hit(o.fromQueue ? "admission.from-queue" : "admission.straight-through");
    },
  };
}
