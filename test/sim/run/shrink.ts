import { makePlan, type Step } from "./plan.js";
import { optionsForSeed, type SimOptions, type SimProfile } from "./sim-options.js";
import { runSeed } from "./run-seed.js";

/**
 * Shrinks a failing seed's plan (delta debugging): drops chunks of steps,
 * halving the chunk size, keeping a removal whenever the run still violates
 * the same invariant. Deterministic: each candidate is re-run from the seed.
 * Bounded by `maxRuns` so a campaign's report never waits long.
 */
export async function shrinkSeed(seed: number, invariant: string, maxRuns = 60, profile: SimProfile = "short", overrides: Partial<SimOptions> = {}): Promise<Step[]> {
  let plan = makePlan(optionsForSeed(seed, overrides, profile));
  let runs = 0;
  let chunk = Math.max(1, Math.floor(plan.length / 2));
  while (chunk >= 1 && runs < maxRuns) {
    let removed = false;
    for (let i = 0; i < plan.length && runs < maxRuns; i += chunk) {
      const candidate = [...plan.slice(0, i), ...plan.slice(i + chunk)];
      runs++;
      const r = await runSeed(seed, { plan: candidate, profile, overrides });
      if (r.violations.some((v) => v.invariant === invariant)) {
        plan = candidate;
        removed = true;
        i -= chunk;
      }
    }
    if (!removed) chunk = Math.floor(chunk / 2);
  }
  return plan;
}
