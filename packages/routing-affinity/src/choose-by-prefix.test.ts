import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { chooseByPrefix, type AffinityCandidate } from "./choose-by-prefix.js";

const c = (id: string, inFlight: number, matchedBlocks: number): AffinityCandidate => ({ id, inFlight, matchedBlocks });

describe("chooseByPrefix", () => {
  it("takes the longest match within the margin", () => {
    expect(chooseByPrefix([c("a", 0, 1), c("b", 2, 5), c("c", 0, 0)], "a", 2)).toEqual({ id: "b", why: "prefix" });
  });

  it("passes over a match whose load exceeds the least loaded's by more than the margin", () => {
    expect(chooseByPrefix([c("a", 0, 0), c("b", 3, 5), c("c", 1, 2)], "a", 2)).toEqual({ id: "c", why: "prefix" });
    expect(chooseByPrefix([c("a", 0, 0), c("b", 3, 5)], "a", 2)).toEqual({ id: "a", why: "least-loaded" });
  });

  it("falls back to the default policy's least loaded pick, else the first least loaded", () => {
    expect(chooseByPrefix([c("a", 1, 0), c("b", 0, 0), c("d", 0, 0)], "d", 2)).toEqual({ id: "d", why: "least-loaded" });
    expect(chooseByPrefix([c("a", 1, 0), c("b", 0, 0), c("d", 0, 0)], "a", 2)).toEqual({ id: "b", why: "least-loaded" });
    expect(() => chooseByPrefix([], undefined, 2)).toThrow(RangeError);
  });

  const candidates = fc.uniqueArray(fc.record({ id: fc.string({ minLength: 1, maxLength: 3 }), inFlight: fc.integer({ min: 0, max: 20 }), matchedBlocks: fc.integer({ min: 0, max: 8 }) }), { minLength: 1, maxLength: 8, selector: (x) => x.id });

  it("property: never outside the candidates, never past the margin, longest match at equal load", () => {
    fc.assert(
      fc.property(candidates, fc.integer({ min: 0, max: 5 }), fc.nat(), (cs, margin, leastPick) => {
        const least = cs[leastPick % cs.length]?.id;
        const pick = chooseByPrefix(cs, least, margin);
        const chosen = cs.find((x) => x.id === pick.id);
        expect(chosen).toBeDefined();
        const min = Math.min(...cs.map((x) => x.inFlight));
        expect((chosen?.inFlight ?? Infinity) - min).toBeLessThanOrEqual(margin);
        const eligible = cs.filter((x) => x.inFlight - min <= margin);
        const longest = Math.max(...eligible.map((x) => x.matchedBlocks));
        if (longest > 0) expect(chosen?.matchedBlocks).toBe(longest);
        else expect(chosen?.inFlight).toBe(min);
      }),
      { numRuns: 2_000 },
    );
  });

  it("property: with equal load everywhere, the longest match wins", () => {
    fc.assert(
      fc.property(candidates, fc.integer({ min: 0, max: 5 }), (cs, load) => {
        const equal = cs.map((x) => ({ ...x, inFlight: load }));
        const pick = chooseByPrefix(equal, undefined, 0);
        const longest = Math.max(...equal.map((x) => x.matchedBlocks));
        expect(equal.find((x) => x.id === pick.id)?.matchedBlocks).toBe(longest);
      }),
    );
  });
});
