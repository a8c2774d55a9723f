import { FairShareBound } from "@warden/admission";
import type { Checker } from "./checker.js";

/**
 * Admission gates (models with `admission:`): never more calls in flight
 * through a gate than its capacity; a call let in from the queue never
 * passes a waiting call of a higher class — sheddable never goes before
 * critical; and within a class the fair-share bound holds (FairShareBound,
 * services/coordinator/docs/admission.md): while a call waits with k of its
 * principal's calls ahead of it, no other principal of its class gets more
 * than k + 1 calls let in. Judged at the moment the queue chooses, in the
 * same turn, per gate (each coordinator generation has its own).
 */
export function admissionChecker(): Checker {
  const bounds = new Map<string, FairShareBound<number>>();
  return {
    name: "admission",
    onAdmission(ctx, o, gate) {
      const key = `${String(gate)}/${o.model}`;
      let bound = bounds.get(key);
      if (bound === undefined) {
        bound = new FairShareBound<number>();
        bounds.set(key, bound);
      }
      if (o.kind === "queued") {
        bound.queued(o.ticket, o.cls, o.principal);
        return;
      }
      if (o.kind === "gone") {
        bound.gone(o.ticket);
        return;
      }
      if (o.inFlight > o.capacity) ctx.report("admission capacity", `model ${o.model}: ${String(o.inFlight)} calls in flight through its gate, capacity ${String(o.capacity)}`);
      if (o.fromQueue && o.waitingAbove > 0) ctx.report("admission class order", `model ${o.model}: a ${o.cls} call was let in while ${String(o.waitingAbove)} calls of a higher class waited`);
      for (const why of bound.admitted(o.ticket, o.cls, o.principal)) ctx.report("admission fair share", `model ${o.model}: ${why}`);
      ctx.world.coverage.hit(o.fromQueue ? "admission.from-queue" : "admission.straight-through");
    },
  };
}
