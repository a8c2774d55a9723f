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

  it("keeps a call's arrival in whole ms and its wait and hold to the µs, on both sinks", () => {
    const clock = { now: () => 0, wallNow: () => 1_733_591_234_567.25, setTimer: () => () => undefined } as Clock;
    const rec = { model: "m", cls: "standard", waitMs: 0.123_456_7, durMs: 12.000_4, ok: true } as const;
    const objects: TraceLine[] = [];
    const texts: string[] = [];
    traceCalls(clock, { record: (l) => objects.push(l) }).callEnded(rec);
    traceCalls(clock, { record: () => expect.unreachable(), recordJson: (j) => texts.push(j) }).callEnded(rec);
    expect(objects[0]).toMatchObject({ at: 1_733_591_234_555, waitMs: 0.123, durMs: 12 });
    expect(texts).toEqual(['{"t":"call","at":1733591234555,"m":"m","waitMs":0.123,"durMs":12,"ok":true,"cls":"standard"}']);
    // Every µs step of the text, against number-to-string of the rounded value.
    const line = (waitMs: number): string => {
      const out: string[] = [];
      traceCalls(clock, { record: () => undefined, recordJson: (j) => out.push(j) }).callEnded({ ...rec, waitMs });
      return out[0] ?? "";
    };
    for (let us = -2_000; us <= 2_000; us++) expect(line(us / 1000)).toContain(`"waitMs":${JSON.stringify(us / 1000)},`);
  });
});
