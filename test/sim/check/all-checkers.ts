import type { Checker } from "./checker.js";
import { evidenceChecker } from "./evidence-checker.js";
import { extraCheckers } from "./extra-checkers.js";
import { routingChecker } from "./routing-checker.js";
import { stopChecker } from "./stop-checker.js";

/** Fresh checkers for one run (they keep per-run state). */
export function allCheckers(): Checker[] {
  return [evidenceChecker(), routingChecker(), stopChecker(), ...extraCheckers()];
}
