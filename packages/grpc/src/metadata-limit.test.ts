import type { IncomingHttpHeaders } from "node:http2";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { headerListBytes, headerListWithin } from "./metadata-limit.js";

describe("headerListWithin", () => {
  it("answers exactly as headerListBytes <= maxBytes, for ASCII, multi-byte and repeated values", () => {
    const value = fc.string({ unit: "grapheme", maxLength: 40 });
    const headers = fc.dictionary(fc.stringMatching(/^[a-z-]{1,12}$/), fc.oneof(value, fc.array(value, { minLength: 1, maxLength: 3 })), { maxKeys: 6 });
    fc.assert(
      fc.property(headers, fc.integer({ min: 0, max: 800 }), (h, maxBytes) => {
        const hs = h as IncomingHttpHeaders;
        expect(headerListWithin(hs, maxBytes)).toBe(headerListBytes(hs) <= maxBytes);
      }),
      { numRuns: 2000 },
    );
  });

  it("measures a list near the limit exactly: two-byte characters count twice", () => {
    // 1 + 4 UTF-8 bytes + 32 of entry overhead = 37: within 37, over 36.
    const h = { k: "éé" } as IncomingHttpHeaders;
    expect(headerListWithin(h, 37)).toBe(true);
    expect(headerListWithin(h, 36)).toBe(false);
  });
});
