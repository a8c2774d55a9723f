import { describe, expect, it } from "vitest";
import { defaultRouting } from "@warden/loader";
import { parseCoordinatorConfig } from "./coordinator-config.js";
import { errorOf, model } from "../test-kit/coordinator-config.fixture.js";

describe("coordinator config: model routing", () => {
  it("parses routing and prefixBalanceMargin; left out, least-in-flight; prefix's margin defaults to 2", () => {
    expect(parseCoordinatorConfig(model("")).models[0]?.routing).toEqual(defaultRouting);
    expect(parseCoordinatorConfig(model("    routing: least-in-flight\n")).models[0]?.routing).toEqual({ mode: "least-in-flight" });
    expect(parseCoordinatorConfig(model("    routing: prefix\n")).models[0]?.routing).toEqual({ mode: "prefix", balanceMarginCalls: 2 });
    expect(parseCoordinatorConfig(model("    routing: prefix\n    prefixBalanceMargin: 0\n")).models[0]?.routing).toEqual({ mode: "prefix", balanceMarginCalls: 0 });
    expect(parseCoordinatorConfig(model("    routing: prefix\n    prefixBalanceMargin: 65536\n")).models[0]?.routing).toEqual({ mode: "prefix", balanceMarginCalls: 65_536 });
  });

  it("refuses each bad value, naming the field", () => {
    const cases: [string, RegExp][] = [
      [model("    routing: sticky\n"), /^models\[0\]\.routing: must be one of least-in-flight, prefix, got "sticky"/],
      [model("    routing: 1\n"), /^models\[0\]\.routing: /],
      [model("    routing: prefix\n    prefixBalanceMargin: -1\n"), /^models\[0\]\.prefixBalanceMargin: must be an integer in \[0, 65536\]/],
      [model("    routing: prefix\n    prefixBalanceMargin: 1.5\n"), /^models\[0\]\.prefixBalanceMargin: /],
      [model("    routing: prefix\n    prefixBalanceMargin: 65537\n"), /^models\[0\]\.prefixBalanceMargin: /],
      [model('    routing: prefix\n    prefixBalanceMargin: "2"\n'), /^models\[0\]\.prefixBalanceMargin: /],
      [model("    prefixBalanceMargin: 2\n"), /^models\[0\]\.prefixBalanceMargin: applies only with routing: prefix/],
    ];
    for (const [yaml, re] of cases) expect(errorOf(yaml), yaml).toMatch(re);
  });
});
