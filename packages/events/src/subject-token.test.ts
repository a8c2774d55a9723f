import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { escapeSubjectToken, unescapeSubjectToken } from "./subject-token.js";

describe("escapeSubjectToken", () => {
  it("escapes the documented characters", () => {
    expect(escapeSubjectToken("a.b")).toBe("a_2Eb");
    expect(escapeSubjectToken("a_b")).toBe("a_5Fb");
    expect(escapeSubjectToken("llama-8b")).toBe("llama-8b");
  });

  it("escapes wildcards, whitespace, control and non-ASCII characters", () => {
    expect(escapeSubjectToken("*")).toBe("_2A");
    expect(escapeSubjectToken(">")).toBe("_3E");
    expect(escapeSubjectToken("a b\tc\n")).toBe("a_20b_09c_0A");
    expect(escapeSubjectToken("é")).toBe("_C3_A9");
  });

  it("maps the empty string to a lone underscore", () => {
    expect(escapeSubjectToken("")).toBe("_");
    expect(unescapeSubjectToken("_")).toBe("");
  });

  it("round-trips any well-formed string and always yields one safe token", () => {
    const strings = fc.oneof(
      fc.string({ unit: "binary-ascii" }),
      fc.string({ unit: "grapheme" }),
      fc.string({ unit: fc.constantFrom(".", "_", "*", ">", " ", "a", "5", "F", "\u0000", "é") }),
    );
    fc.assert(
      fc.property(strings, (s) => {
        const token = escapeSubjectToken(s);
        expect(token.length).toBeGreaterThan(0);
        expect(token).toMatch(/^[\x21-\x7e]+$/);
        expect(token).not.toMatch(/[.*>]/);
        expect(unescapeSubjectToken(token)).toBe(s);
      }),
      { numRuns: 2_000 },
    );
  });

  it("is injective: distinct ids never share a token", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary-ascii" }), fc.string({ unit: "binary-ascii" }), (a, b) => {
        fc.pre(a !== b);
        expect(escapeSubjectToken(a)).not.toBe(escapeSubjectToken(b));
      }),
      { numRuns: 1_000 },
    );
  });

  it("rejects malformed tokens", () => {
    expect(() => unescapeSubjectToken("a_2")).toThrow(/bad escape/);
    expect(() => unescapeSubjectToken("a_zz")).toThrow(/bad escape/);
    expect(() => unescapeSubjectToken("a.b")).toThrow();
    expect(() => unescapeSubjectToken("*")).toThrow();
    expect(() => unescapeSubjectToken("_FF")).toThrow(/UTF-8/);
  });
});
