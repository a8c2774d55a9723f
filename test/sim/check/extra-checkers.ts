import type { Checker } from "./checker.js";
import { orphanGroupChecker } from "./orphan-group-checker.js";
import { journalFirstChecker } from "./journal-first-checker.js";
import { limitChecker } from "./limit-checker.js";
import { loadAnswerChecker } from "./load-answer-checker.js";
import { phantomChecker } from "./phantom-checker.js";
import { replicaChecker } from "./replica-checker.js";
import { requestStateChecker } from "./request-state-checker.js";
import { restoredIntentsChecker } from "./restored-intents-checker.js";
import { routePendingChecker } from "./route-pending-checker.js";
import { outageRouteChecker } from "./outage-route-checker.js";
import { prefixMarginChecker } from "./prefix-margin-checker.js";

/**
 * Checkers added for the planted bugs that no other
 * checker covered: the outbox's journal-before-publish order, the per-node
 * limit at every start, phantoms (registered but not held; a failed remote
 * stop registered again), routing to a pending instance, stop intents
 * restored at a restart, request state kept for ready and pending instances,
 * the replica rules, a load refused for room answered "not now", and prefix routing's balance margin. Real invariants: they run in every campaign.
 */
export function extraCheckers(): Checker[] {
  return [journalFirstChecker(), limitChecker(), phantomChecker(), routePendingChecker(), outageRouteChecker(), restoredIntentsChecker(), requestStateChecker(), replicaChecker(), orphanGroupChecker(), loadAnswerChecker(), prefixMarginChecker()];
}
