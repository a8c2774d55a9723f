import { describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { defaultSimKnobs, parseSimEnv, parseSimOptions } from "./sim-knobs.js";

describe("backend-sim knobs", () => {
  it("reads SIM_ variables from the environment", () => {
    const k = parseSimEnv({ SIM_LOAD_DELAY_MS: "2000", SIM_FREE: "hang", SIM_IGNORE_SIGTERM: "true", SIM_EXIT_CODE: "3", PATH: "/bin" });
    expect(k).toEqual({ ...defaultSimKnobs, loadDelayMs: 2000, free: "hang", ignoreSigterm: true, exitCode: 3 });
  });

  it("applies sim.<knob>:<value> options over a base, ignoring the model's own options", () => {
    const base = parseSimEnv({ SIM_PREDICT_TOKENS: "9" });
    const k = parseSimOptions(["gpu_layers:10", "sim.crash_after:2", "sim.alloc_mib:64", "sim.fail_load:bad: file", "sim.hang_on_free:true"], base);
    expect(k).toMatchObject({ predictTokens: 9, crashAfter: 2, allocMib: 64, failLoad: "bad: file", free: "hang" });
  });

  it("reads the throughput knobs parallel and token_delay_ms, both off by default", () => {
    expect([defaultSimKnobs.parallel, defaultSimKnobs.tokenDelayMs]).toEqual([0, 0]);
    expect(parseSimEnv({ SIM_PARALLEL: "1", SIM_TOKEN_DELAY_MS: "20" })).toMatchObject({ parallel: 1, tokenDelayMs: 20 });
    expect(parseSimOptions(["sim.parallel:4", "sim.token_delay_ms:5"], parseSimEnv({ SIM_PARALLEL: "1" }))).toMatchObject({ parallel: 4, tokenDelayMs: 5 });
    expect(() => parseSimOptions(["sim.parallel:-1"])).toThrow(/Options\[0\]: expected a non-negative integer/);
    expect(() => parseSimEnv({ SIM_PARALLEL: "1000001" })).toThrow(/SIM_PARALLEL: must be <= 1000000/);
    expect(() => parseSimEnv({ SIM_TOKEN_DELAY_MS: "2.5" })).toThrow(/SIM_TOKEN_DELAY_MS: expected a non-negative integer/);
  });

  it("rejects unknown knobs and bad values, naming where they came from", () => {
    const bad = (fn: () => unknown, field: RegExp) => {
      try {
        fn();
      } catch (err) {
        expect(isWardenError(err, Code.InvalidArgument)).toBe(true);
        expect((err as Error).message).toMatch(field);
        return;
      }
      throw new Error("expected an error");
    };
    bad(() => parseSimEnv({ SIM_LOAD_DELAY: "1" }), /SIM_LOAD_DELAY: unknown backend-sim knob/);
    bad(() => parseSimEnv({ SIM_LOAD_DELAY_MS: "-1" }), /SIM_LOAD_DELAY_MS: expected a non-negative integer/);
    bad(() => parseSimOptions(["sim.free:sometimes"]), /Options\[0\]: expected ok, unimplemented, hang or fail/);
    bad(() => parseSimOptions(["m:1", "sim.exit_code:300"]), /Options\[1\]: exit code must be/);
    bad(() => parseSimOptions(["sim.ignore_sigterm"]), /Options\[0\]: expected "sim.<knob>:<value>"/);
  });
});
