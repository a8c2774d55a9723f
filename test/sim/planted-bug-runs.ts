import type { SimOptions } from "./run/sim-options.js";
import { runSeed } from "./run/run-seed.js";
import type { Violation } from "./check/checker.js";

/** What hunting one planted bug over a seed range found. */
export interface HuntResult {
  /** The first seed that reported a violation with the bug planted; undefined when none did. */
  readonly seed: number | undefined;
  /** Seeds run until then (the catching one included). */
  readonly seedsRun: number;
  readonly violation: Violation | undefined;
  /** Violations the catching seed reports without the bug (must be none). */
  readonly cleanViolations: readonly Violation[] | undefined;
  /** Seeds whose run threw out of the simulation (not counted as catches). */
  readonly threw: readonly number[];
  /** Seeds that reported a violation with the bug and without it (not counted as catches). */
  readonly dirty: readonly number[];
}

/** One seed's outcome: its violations, or the exception that ended the run. */
export type SeedOutcome = { readonly t: "ran"; readonly violations: readonly Violation[] } | { readonly t: "threw"; readonly error: string };

/** Runs one seed with `bug` planted (or none). */
export async function runWithBug(seed: number, bug: string | undefined, overrides: Partial<SimOptions>): Promise<SeedOutcome> {
  try {
    const r = await runSeed(seed, { overrides: { ...overrides, ...(bug === undefined ? {} : { plantedBug: bug }) } });
    return { t: "ran", violations: r.violations };
  } catch (err) {
    return { t: "threw", error: String(err) };
  }
}

/**
 * Runs seeds `from`…`to` with `bug` planted until one reports an invariant
 * violation that the same seed without the bug does not report. A run that
 * throws is no catch: only a checker's report counts.
 */
export async function huntPlantedBug(bug: string, from: number, to: number, overrides: Partial<SimOptions>): Promise<HuntResult> {
  const threw: number[] = [];
  const dirty: number[] = [];
  for (let seed = from; seed <= to; seed++) {
    const o = await runWithBug(seed, bug, overrides);
    if (o.t === "threw") {
      threw.push(seed);
      continue;
    }
    if (o.violations.length > 0) {
      const clean = await runWithBug(seed, undefined, overrides);
      const cleanViolations = clean.t === "ran" ? clean.violations : [{ invariant: "threw", message: clean.error, atMs: Number.NaN }];
      // A seed that fails without the bug too says nothing about the bug.
      if (cleanViolations.length > 0) {
        dirty.push(seed);
        continue;
      }
      return { seed, seedsRun: seed - from + 1, violation: o.violations[0], cleanViolations, threw, dirty };
    }
  }
  return { seed: undefined, seedsRun: to - from + 1, violation: undefined, cleanViolations: undefined, threw, dirty };
}
