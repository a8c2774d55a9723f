import { describe, expect, it } from "vitest";
import { requiredCoverage } from "./check/coverage.js";
import { runCampaign } from "./run/campaign.js";
import { allFaultTypes } from "./run/sim-options.js";

/** Seeds per `npm test` (short profile, 2 worker threads): ~2-3 min on 2 quiet cores. */
const seeds = Number(process.env["WARDEN_SIM_SEEDS"] ?? "1000");

describe("simulation campaign", () => {
  it(`${String(seeds)} seeds hold every invariant and reach every fault type and coverage counter`, async () => {
    const r = await runCampaign(1, seeds, 2);
    const failures = r.failures.map((f) => `seed ${String(f.seed)}: [${f.violations[0]?.invariant ?? ""}] ${f.violations[0]?.message ?? ""} (replay: npm run sim -- --seed ${String(f.seed)})`);
    expect(failures).toEqual([]);
    expect(allFaultTypes.filter((f) => (r.coverage.get(`fault.${f}`) ?? 0) === 0)).toEqual([]);
    expect(requiredCoverage.filter((k) => (r.coverage.get(k) ?? 0) === 0)).toEqual([]);
  }, 600_000);
});
