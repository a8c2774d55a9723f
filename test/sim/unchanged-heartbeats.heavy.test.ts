import { describe, expect, it } from "vitest";
import { runSeed } from "./run/run-seed.js";
import type { SimOptions } from "./run/sim-options.js";

/**
 * The skip of unchanged heartbeats as production runs it (SimOptions.unchangedHeartbeats
 * `skip`, no differential checker in its place) decides exactly as the full reconcile of
 * every heartbeat: the whole trace of a seed — every RPC, event and answer — is byte-identical
 * between the two. Seed 47 with the planted bug's options (10 + 5 minutes, replicas and HA
 * off) is where the differential checker catches `unchanged-ignores-missing`: with that bug
 * the skip's trace departs from the full reconcile's, so the comparison is not vacuous.
 * Wider: `node --import tsx test/sim/run/trace-hashes.ts --to 100 --unchanged skip` against
 * `--unchanged full` (test/sim/README.md).
 */
const options: Partial<SimOptions> = { durationMs: 10 * 60_000, quiesceMs: 5 * 60_000, replicaProfile: false, haProfile: false };

async function trace(unchangedHeartbeats: "skip" | "full", plantedBug?: string): Promise<{ hash: number; steps: number; violations: number }> {
  const r = await runSeed(47, { overrides: { ...options, unchangedHeartbeats, ...(plantedBug === undefined ? {} : { plantedBug }) } });
  return { hash: r.traceHash, steps: r.steps, violations: r.violations.length };
}

describe("unchanged heartbeats in the simulation", () => {
  it("seed 47: the skip's trace is the full reconcile's; with unchanged-ignores-missing planted it is not", async () => {
    const full = await trace("full");
    expect(full.violations).toBe(0);
    expect(await trace("skip")).toEqual(full);
    expect((await trace("skip", "unchanged-ignores-missing")).hash).not.toBe(full.hash);
  });
});
