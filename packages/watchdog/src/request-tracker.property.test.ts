/**
 * The tracker answers `idle` (placement's per-instance check) and
 * `busyAddresses` (the scrape's) from a small set of addresses with requests
 * open instead of its map of every address. Whatever the calls, that set
 * agrees with the counts.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { RequestTracker, type Completion } from "./request-tracker.js";

const addresses = ["a:1", "b:1", "c:1"] as const;

const op = fc.record({
  t: fc.constantFrom("track", "complete", "mark", "unmark", "clear", "touch", "seed"),
  address: fc.nat(2),
  pick: fc.nat(),
});

describe("RequestTracker.idle and busyAddresses", () => {
  it("agree with inFlight(address) after any sequence of begins, ends (twice too), legacy marks, clears and touches", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        let now = 0;
        const t = new RequestTracker(() => now++, 10, 100);
        const completions: Completion[] = [];
        for (const o of ops) {
          const address = addresses[o.address] ?? "a:1";
          if (o.t === "track") completions.push(t.track(address));
          // A completion may run after its address was cleared, and more than once: both are no-ops.
          else if (o.t === "complete") completions[o.pick % Math.max(1, completions.length)]?.();
          else if (o.t === "mark") t.mark(address);
          else if (o.t === "unmark") t.unmark(address);
          else if (o.t === "clear") t.clear(address);
          else if (o.t === "touch") t.touch(address);
          else t.seedIdle(address);
          for (const a of addresses) expect(t.idle(a), `${a} after ${o.t}`).toBe(t.inFlight(a) === 0);
          const busy = addresses.filter((a) => t.inFlight(a) !== 0).map((a): [string, number] => [a, t.inFlight(a)]);
          expect([...t.busyAddresses()].sort(([a], [b]) => a.localeCompare(b)), `busy after ${o.t}`).toEqual(busy);
        }
      }),
      { numRuns: 300 },
    );
  });
});
