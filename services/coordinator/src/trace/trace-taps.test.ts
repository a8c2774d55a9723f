import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Clock } from "@warden/common";
import type { TraceLine } from "@warden/whatif";
import { traceCalls } from "./trace-taps.js";

describe("traceCalls", () => {
  it("writes a call's line as JSON text exactly as JSON.stringify writes the line object (odd numbers, any model name)", () => {
    const num = fc.oneof(fc.double(), fc.integer(), fc.constantFrom(0, -0, 1e21, 5e-7, Number.NaN, Number.POSITIVE_INFINITY));
    const record = fc.record(
      { model: fc.string({ unit: "grapheme", maxLength: 20 }), cls: fc.constantFrom("critical", "standard", "sheddable"), waitMs: num, durMs: num, ok: fc.boolean(), reqBytes: fc.nat(), respBytes: fc.nat() },
      { requiredKeys: ["model", "cls", "waitMs", "durMs", "ok"] },
    );
    fc.assert(
      fc.property(record, num, (rec, wall) => {
        const clock = { now: () => 0, wallNow: () => wall, setTimer: () => () => undefined } as Clock;
        const objects: TraceLine[] = [];
        const texts: string[] = [];
        traceCalls(clock, { record: (l) => objects.push(l) }).callEnded(rec);
        traceCalls(clock, { record: () => expect.unreachable(), recordJson: (j) => texts.push(j) }).callEnded(rec);
        expect(texts).toEqual(objects.map((l) => JSON.stringify(l)));
      }),
      { numRuns: 3000 },
    );
  });
});
