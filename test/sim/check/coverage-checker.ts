import { EvictionFailedOutcome } from "@warden/proto";
import type { Checker } from "./checker.js";

/** Not an invariant: counts the "sometimes" branches events reveal. */
export function coverageChecker(): Checker {
  return {
    name: "coverage",
    onEvent(ctx, e) {
      const cov = ctx.world.coverage;
      const p = e.payload;
      switch (p.case) {
        case "evictionFailed":
          if (!e.incarnation.startsWith("pid:")) cov.hit(p.value.outcome === EvictionFailedOutcome.LEFTOVER ? "eviction.leftover" : "eviction.registered-again");
          if (p.value.error.includes("waiting to shut down")) cov.hit("stop.blocked-by-load");
          return;
        case "instanceAdopted":
          cov.hit(p.value.asLeftover ? "adoption.leftover" : "adoption.remote-only");
          return;
        case "orphanAdopted":
          cov.hit("orphan.adopted");
          return;
        case "evictionRetried":
          cov.hit("leftover.retried");
          return;
        case "recovered":
          cov.hit("journal.recovered-event");
          return;
        default:
          return;
      }
    },
  };
}
