import { Code, WardenError } from "@warden/common";
import type { Shortfall } from "@warden/watchdog";
import type { LoaderState } from "./loader-state.js";
import type { WaitingPhase } from "./load-jobs.js";
import type { HeldInstance } from "./loader-types.js";
import type { ReplicaLoad } from "./load-path.js";
import type { ModelSpec } from "./model-spec.js";
import { pinsAndGroupsNow } from "./pins-and-groups-now.js";
import type { BackendHandle } from "./ports.js";
import { replicaNotNeeded, rolloutWanted } from "./replica-not-needed.js";
import { chooseReplica } from "./replica-routing.js";
import { replicaSpare } from "./replica-spare.js";
import { servedMeanwhile } from "./served-meanwhile.js";

/**
 * Admission with the need-more retry loop (localai-semantics §4.2),
 * re-planning placement on every attempt. Pending evictions settle before an
 * attempt resolves. Two answers, the same for every caller:
 * - never: no node can ever take the model (ready nodes judged it: none
 *   matches its selector or backend, it is larger than each) — fails
 *   FAILED_PRECONDITION at once, no retries, no wait;
 * - not now: for a reason that ends by itself (the only matching node
 *   draining or unreachable, none ready, nodes not reported since a restart,
 *   no room that an eviction could make now: a node's budget or slots held by
 *   pinned, busy, loading, spared or stopping instances, victims stopped and
 *   more needed) — waits `loadWaitMs`, retrying every `retryIntervalMs`, then
 *   fails UNAVAILABLE with the reason.
 * An attempt whose victims settled with nothing more needed asks again at
 * once (an eviction then a load, as usual; at most `maxAttempts` such
 * attempts in a row, so a node whose room is always taken by another load
 * cannot spin) and is not waiting. Every other attempt that does not admit
 * makes the model's load job "waiting" (load.waiting once per job).
 */
export async function admitLoad<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, preferredNode: string | undefined, signal: AbortSignal, replica: ReplicaLoad | undefined, actor?: string): Promise<string | HeldInstance<H>> {
  let lastReason: string;
  // The last refusal was (also) for instances a node not heard from since the
  // restart may run: it ends when that node reports or is lost — answered
  // naming that node.
  let unconfirmedOn: string | undefined;
  // Attempts in a row whose victims settled with nothing more needed (asked again at once).
  let settledInARow = 0;
  const waitUntilMs = s.o.clock.now() + s.loadWaitMs;
  for (;;) {
    if (signal.aborted) throw WardenError.from(signal.reason);
    if (replica !== undefined) replicaStillWanted(s, spec, replica);
    // An on-demand load serves calls while no replica is routable; one adopted
    // during admission (a node's inventory, a restarted coordinator) serves
    // them instead: no second copy (seed 24 put a second m0, max 1, beside an
    // instance adopted during the load's admission retries).
    const adopted = replica === undefined ? servedMeanwhile(s, spec) : undefined;
    if (adopted !== undefined) return adopted;
    // A named node that has not reported since it registered may run what this coordinator does not know: wait for its report.
    const unreported = preferredNode !== undefined && s.o.placement.awaitingInventory?.(preferredNode) === true;
    const choice = preferredNode === undefined ? s.o.placement.choose(spec) : unreported ? { nodeId: undefined, reason: `node "${preferredNode}" has not reported its backends since it registered`, transient: true as const } : { nodeId: preferredNode };
    if (choice.nodeId === undefined) {
      lastReason = choice.reason;
      if (unreported) unconfirmedOn = preferredNode;
      const transient = ("transient" in choice && choice.transient === true) || s.unconfirmed.size > 0;
      // Never: waiting cannot change a verdict every ready node gave — answer at once.
      if (!transient) throw new WardenError(Code.FailedPrecondition, `cannot load model "${spec.id}": ${lastReason}`, { details: { model: spec.id, reason: lastReason } });
    } else {
      const spare = replica === undefined ? undefined : replicaSpare(s, spec);
      const r = await s.watchdog.admit({ nodeId: choice.nodeId, model: spec.id, incarnation, ...pinsAndGroupsNow(s, spec), sizeBytes: spec.sizeBytes, ...(spare === undefined ? {} : { spare }) });
      // Admission may have waited for evictions to settle: adopted meanwhile, give the reservation back.
      const adoptedMeanwhile = r.t === "admitted" && replica === undefined ? servedMeanwhile(s, spec) : undefined;
      if (adoptedMeanwhile !== undefined) {
        s.core.releaseReservation(incarnation);
        return adoptedMeanwhile;
      }
      if (r.t === "admitted") {
        if (r.limitExceeded !== undefined) {
          s.o.events.emit({
            type: "policy.limit-exceeded",
            nodeId: choice.nodeId,
            model: spec.id,
            address: "",
            incarnation,
            limit: r.limitExceeded.limit,
            occupied: r.limitExceeded.occupied,
            pinned: r.limitExceeded.pinnedIncarnations.length,
          });
        }
        return choice.nodeId;
      }
      lastReason = `${r.cause === "group" ? "group conflict" : "limit"} on node "${choice.nodeId}": ${describeShortfall(r.shortfall)}`;
      unconfirmedOn = (r.shortfall.unconfirmed ?? 0) > 0 ? choice.nodeId : undefined;
      // Victims settled without need-more: asked again at once — not waiting (an eviction then a load, as usual).
      if (!r.needMore && r.settles.length > 0 && settledInARow < s.maxAttempts) {
        settledInARow++;
        continue;
      }
    }
    settledInARow = 0;
    // Not now: one wait for every caller (gRPC, HTTP, CLI), loadWait, whatever holds the room —
    // a draining node, pinned or busy instances, evictions under way and more needed.
    if (s.o.clock.now() >= waitUntilMs) break;
    jobWaiting(s, spec, incarnation, "waiting_for_node", lastReason, actor);
    await s.o.sleep(s.retryIntervalMs, signal);
  }
  if (unconfirmedOn !== undefined) {
    throw new WardenError(Code.Unavailable, `cannot load model "${spec.id}" yet: ${lastReason}; retry once node "${unconfirmedOn}" has reported`, { details: { model: spec.id, nodeId: unconfirmedOn } });
  }
  throw new WardenError(Code.Unavailable, `cannot load model "${spec.id}" now (waited ${String(Math.round(s.loadWaitMs / 1000))}s): ${lastReason}; retry once a node can take it (a draining node undrained, nodes (re)registered, room made)`, { details: { model: spec.id, reason: lastReason, retryAfterS: retryAfterS(s.loadWaitMs) } });
}

/** The model's load job waits for `phase`; load.waiting once per job. */
export function jobWaiting<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, phase: WaitingPhase, reason: string, actor: string | undefined): void {
  if (s.jobs.waiting(spec.id, incarnation, phase, reason, { nowMs: s.o.clock.now(), wallMs: s.o.clock.wallNow() }, actor)) {
    s.o.events.emit({ type: "load.waiting", nodeId: "", model: spec.id, address: "", incarnation: "", loadIncarnation: incarnation, reason, ...(actor === undefined ? {} : { actor }) });
  }
}

/**
 * Throws ABORTED (not a failure: no breaker; the reconciler asks again on a
 * later tick) when a replica load is not wanted now, checked before every
 * placement attempt: replicas adopted meanwhile make it one too many, and a
 * node that has not reported an inventory yet (a restarted coordinator, after
 * its admission gate) may run replicas about to be adopted — placing now
 * could exceed max, or land where spread forbids.
 */
function replicaStillWanted<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, replica: ReplicaLoad): void {
  if (replicaNotNeeded(chooseReplica(s, spec.id), s.models.get(spec.id) ?? spec, replica, replica.cause !== "rollout" || rolloutWanted(s, spec))) throw new WardenError(Code.Aborted, `replica load of model "${spec.id}" not needed any more`);
  const inv = s.o.inventories.findModel(spec.id);
  if (inv.t === "unknown" && inv.noInventoryYet === true) throw new WardenError(Code.Aborted, `replica load of model "${spec.id}" deferred: ${inv.reason}`);
}

/** The Retry-After an HTTP caller gets: a tenth of the wait, between 1 s and 30 s. */
function retryAfterS(loadWaitMs: number): number {
  return Math.min(30, Math.max(1, Math.round(loadWaitMs / 10_000)));
}

function describeShortfall(s: Shortfall): string {
  const parts: string[] = [];
  if (s.busy > 0) parts.push(`${String(s.busy)} busy`);
  if (s.loading > 0) parts.push(`${String(s.loading)} loading`);
  if (s.reserved > 0) parts.push(`${String(s.reserved)} reserved`);
  if (s.pending > 0) parts.push(`${String(s.pending)} pending eviction`);
  if (s.freed > 0) parts.push(`${String(s.freed)} freed`);
  if (s.leftovers > 0) parts.push(`${String(s.leftovers)} leftover`);
  if (s.orphans > 0) parts.push(`${String(s.orphans)} orphan`);
  if ((s.unconfirmed ?? 0) > 0) parts.push(`${String(s.unconfirmed)} unconfirmed (known from the journal, its node not reported yet)`);
  if (s.pinned > 0) parts.push(`${String(s.pinned)} pinned`);
  if ((s.spared ?? 0) > 0) parts.push(`${String(s.spared)} spared (replicas a replica load must not evict)`);
  return parts.length > 0 ? `blocked by ${parts.join(", ")} instance(s)` : `${String(s.missing)} more slot(s) needed`;
}
