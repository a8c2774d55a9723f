import { describe, expect, it } from "vitest";
import { parseAgentArgs } from "./agent-args.js";

describe("agent command line", () => {
  it("parses every flag, with and without =", () => {
    expect(parseAgentArgs(["--config", "a.yaml", "--coordinator=10.0.0.1:7000", "--listen", "0.0.0.0:7443", "--stop-backends-on-exit", "--check-config", "--insecure"])).toEqual({
      configPath: "a.yaml",
      coordinator: ["10.0.0.1:7000"],
      listen: "0.0.0.0:7443",
      stopBackendsOnExit: true,
      checkConfig: true,
      insecure: true,
      help: false,
    });
    expect(parseAgentArgs(["--help"]).help).toBe(true);
  });

  it("rejects unknown flags, a missing --config and malformed addresses", () => {
    expect(() => parseAgentArgs(["--config", "a", "--bogus"])).toThrow(/--bogus: unknown argument/);
    expect(() => parseAgentArgs([])).toThrow(/--config: required/);
    expect(() => parseAgentArgs(["--config", "a", "--coordinator", "nohost"])).toThrow(/--coordinator: expected host:port/);
    expect(parseAgentArgs(["--config", "a", "--coordinator", "10.0.0.1:7000,10.0.0.2:7000"]).coordinator).toEqual(["10.0.0.1:7000", "10.0.0.2:7000"]);
    expect(() => parseAgentArgs(["--config", "a", "--coordinator", "a:1,a:1"])).toThrow(/--coordinator: "a:1" is listed twice/);
    expect(() => parseAgentArgs(["--config", "a", "--coordinator", Array.from({ length: 9 }, (_, i) => `h:${String(i + 1)}`).join(",")])).toThrow(/--coordinator: at most 8/);
    expect(() => parseAgentArgs(["--config"])).toThrow(/--config: needs a value/);
  });
});
