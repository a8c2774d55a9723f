import { describe, expect, it } from "vitest";
import { parseSimArgs, simUsage } from "./sim-args.js";
import { simKnobKeys } from "./sim-knobs.js";

describe("backend-sim command line", () => {
  it("takes --addr in both spellings, and --help without it", () => {
    expect(parseSimArgs(["--addr", "127.0.0.1:5000"])).toEqual({ addr: "127.0.0.1:5000", help: false });
    expect(parseSimArgs(["--addr=[::1]:5000"]).addr).toBe("[::1]:5000");
    expect(parseSimArgs(["--help"]).help).toBe(true);
  });

  it("rejects a missing or malformed --addr and unknown arguments", () => {
    expect(() => parseSimArgs([])).toThrow(/--addr: required/);
    expect(() => parseSimArgs(["--addr", "5000"])).toThrow(/--addr: expected host:port/);
    expect(() => parseSimArgs(["--addr", "a:1", "--port", "2"])).toThrow(/--port: unknown argument/);
  });

  it("--help lists every knob", () => {
    const listed = Object.keys(simKnobKeys).filter((k) => new RegExp(`^  ${k} `, "m").test(simUsage));
    expect(listed).toEqual(Object.keys(simKnobKeys));
  });
});
