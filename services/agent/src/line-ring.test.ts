import { describe, expect, it } from "vitest";
import { LineRing } from "./line-ring.js";

describe("line ring", () => {
  it("keeps only the last lines, joins chunks split mid-line, and bounds line length", () => {
    const r = new LineRing(3, 10);
    r.write("one\ntw");
    r.write("o\nthree\nfour\n");
    expect(r.snapshot()).toEqual(["two", "three", "four"]);
    r.write("x".repeat(50) + "\n");
    expect(r.snapshot()[2]).toBe("x".repeat(10));
  });

  it("returns the last non-empty line, including an unterminated one", () => {
    const r = new LineRing(5);
    r.write("error: boom\n\n");
    expect(r.lastLine()).toBe("error: boom");
    r.write("partial");
    expect(r.lastLine()).toBe("partial");
    r.end();
    expect(r.snapshot()).toEqual(["error: boom", "", "partial"]);
  });
});
