import { describe, expect, it } from "vitest";
import { resolveAgentConfig } from "./agent-config.js";
import { parseAgentArgs } from "./agent-args.js";
import { placementLimitsMessage } from "./agent-placement-limits.js";

const base = { nodeId: "n1", stateDir: "/tmp/x", ports: { min: 20000, max: 20010 }, catalog: { sim: { command: "/bin/true" } } };

function errorOf(extra: Record<string, unknown>): string {
  try {
    resolveAgentConfig({ ...base, ...extra });
  } catch (err) {
    return (err as Error).message;
  }
  return "accepted";
}

describe("agent placement limits", () => {
  it("parses maxReplicasPerModel and memoryBudget (a size or a percentage); both optional", () => {
    expect(resolveAgentConfig(base).placementLimits).toEqual({});
    expect(resolveAgentConfig({ ...base, maxReplicasPerModel: 4, memoryBudget: "40GiB" }).placementLimits).toEqual({ maxReplicasPerModel: 4, memoryBudget: { t: "bytes", bytes: 40 * 1024 ** 3 } });
    expect(resolveAgentConfig({ ...base, memoryBudget: "80%" }).placementLimits).toEqual({ memoryBudget: { t: "percent", percent: 80 } });
    expect(resolveAgentConfig({ ...base, maxReplicasPerModel: 1024, memoryBudget: "100%" }).placementLimits).toEqual({ maxReplicasPerModel: 1024, memoryBudget: { t: "percent", percent: 100 } });
    expect(resolveAgentConfig({ ...base, memoryBudget: 1 }).placementLimits).toEqual({ memoryBudget: { t: "bytes", bytes: 1 } });
  });

  it("refuses each bad value naming the field", () => {
    for (const v of [0, 1025, 2.5, "many", -1]) expect(errorOf({ maxReplicasPerModel: v }), String(v)).toMatch(/maxReplicasPerModel: must be an integer in 1\.\.1024/);
    for (const v of ["0%", "101%", "-5%", "lots", "0", 0, "8 gigs", [], "9999999PiB", "99999999TiB"]) expect(errorOf({ memoryBudget: v }), JSON.stringify(v)).toMatch(/memoryBudget: must be a size like "40GiB"/);
  });

  it("the command line overrides, naming the flag when bad; RegisterRequest.limits carries them", () => {
    const a = parseAgentArgs(["--config", "a.yaml", "--max-replicas-per-model", "3", "--memory-budget=75%"]);
    expect([a.maxReplicasPerModel, a.memoryBudget]).toEqual([3, { t: "percent", percent: 75 }]);
    expect(() => parseAgentArgs(["--config", "a", "--max-replicas-per-model", "0"])).toThrow(/--max-replicas-per-model: must be an integer in 1\.\.1024/);
    expect(() => parseAgentArgs(["--config", "a", "--memory-budget", "200%"])).toThrow(/--memory-budget: /);
    expect(placementLimitsMessage({ maxReplicasPerModel: 3, memoryBudget: { t: "bytes", bytes: 1024 } })).toEqual({ maxReplicasPerModel: 3, memoryBudget: { case: "memoryBudgetBytes", value: 1024n } });
    expect(placementLimitsMessage({ memoryBudget: { t: "percent", percent: 80 } })).toEqual({ memoryBudget: { case: "memoryBudgetPercent", value: 80 } });
    expect(placementLimitsMessage({})).toEqual({});
  });
});
