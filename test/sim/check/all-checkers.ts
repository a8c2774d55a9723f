import { accountingChecker } from "./accounting-checker.js";
import { admissionChecker } from "./admission-checker.js";
import { auditChecker } from "./audit-checker.js";
import { boundedChecker } from "./bounded-checker.js";
import type { Checker } from "./checker.js";
import { convergenceChecker } from "./convergence-checker.js";
import { coverageChecker } from "./coverage-checker.js";
import { evidenceChecker } from "./evidence-checker.js";
import { extraCheckers } from "./extra-checkers.js";
import { nodeHealthChecker } from "./node-health-checker.js";
import { requestChecker } from "./request-checker.js";
import { routingChecker } from "./routing-checker.js";
import { selectionChecker } from "./selection-checker.js";
import { stopChecker } from "./stop-checker.js";

/** Fresh checkers for one run (they keep per-run state). */
export function allCheckers(): Checker[] {
  return [coverageChecker(), evidenceChecker(), routingChecker(), stopChecker(), requestChecker(), accountingChecker(), selectionChecker(), nodeHealthChecker(), boundedChecker(), convergenceChecker(), auditChecker(), admissionChecker(), ...extraCheckers()];
}
