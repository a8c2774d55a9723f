import { Code, WardenError, deadlineSignal, isStaleLeaderEpoch, raceSignal } from "@warden/common";
import type { Shortfall } from "@warden/watchdog";
import { dropHeld, holdInstance, warn, type LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle, StartEvent } from "./ports.js";
import { chooseReplica, pickReplica } from "./replica-routing.js";
import { retireRecycledAddress } from "./recycled-address.js";
import { replicaNotNeeded } from "./replica-not-needed.js";
import { replicaSpare } from "./replica-spare.js";
import { countUnknownOutcomeStart } from "./unknown-outcome-start.js";

// The load path (DESIGN §3.3): coalesced, cooldown-checked, admitted through
// the watchdog with the need-more retry loop, bounded by a deadline; a failed
// load leaves nothing behind.

/**
 * Returns the model's ready instance, loading it if needed. Concurrent
 * calls coalesce on one load; a model in cooldown is refused with
 * RESOURCE_EXHAUSTED (details.retryAfterMs) before anything is evicted; a
 * failed leader gives its followers exactly one shared retry that bypasses
 * the cooldown. A model whose instance is pending eviction or freed waits
 * for the settle (DESIGN §3.4 item 9).
 */
export async function ensureLoaded<H extends BackendHandle>(s: LoaderState<H>, modelId: string, signal: AbortSignal, nodeId?: string, touch = true, actor?: string): Promise<HeldInstance<H>> {
  const spec = s.models.get(modelId);
  if (spec === undefined) throw new WardenError(Code.NotFound, `model: "${modelId}" is not configured`, { details: { field: "model" } });
  const n = s.waiting.get(modelId) ?? 0;
  if (n >= s.maxWaiting) throw new WardenError(Code.ResourceExhausted, `model "${modelId}": ${String(n)} calls already waiting (cap ${String(s.maxWaiting)})`);
  s.waiting.set(modelId, n + 1);
  try {
    return await ensureLoadedInner(s, spec, signal, nodeId, touch, actor);
  } finally {
    const left = (s.waiting.get(modelId) ?? 1) - 1;
    if (left <= 0) s.waiting.delete(modelId);
    else s.waiting.set(modelId, left);
  }
}

async function ensureLoadedInner<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, signal: AbortSignal, nodeId: string | undefined, touch: boolean, actor: string | undefined): Promise<HeldInstance<H>> {
  let bypassCooldown = false;
  let followerRetryUsed = false;
  for (;;) {
    if (signal.aborted) throw WardenError.from(signal.reason);
    const fast = pickReplica(s, spec.id);
    if (fast !== undefined) {
      // (the cache hit below, without visiting every replica)
      if (touch && fast.best.address !== undefined) {
        s.core.updateLastUsed(fast.best.address);
        s.routes.touched(spec.id, fast.best.incarnation);
      }
      return fast.best;
    }
    const c = chooseReplica(s, spec.id);
    if (c.best !== undefined) {
      // A cache hit counts as a use (LocalAI's UpdateLastUsed): an operator's
      // LoadModel of a loaded model moves it to the back of the LRU order.
      // (Routing passes touch=false: it picks by last use and its tracked call touches.)
      if (touch && c.best.address !== undefined) {
        s.core.updateLastUsed(c.best.address);
        s.routes.touched(spec.id, c.best.incarnation);
      }
      return c.best;
    }
    // Only replicas on unreachable nodes and no room for another: the caller
    // sees the node (routing answers UNAVAILABLE, as with one instance).
    if (c.unreachable !== undefined && c.live >= Math.max(1, spec.replicas.max)) return c.unreachable;
    if (c.settling !== undefined && c.unreachable === undefined) {
      await s.settleWaiters.wait(c.settling, signal);
      continue;
    }
    const inflight = s.loads.get(spec.id);
    if (inflight !== undefined) {
      try {
        return await raceSignal(inflight, signal);
      } catch (err) {
        // TS narrows `signal.aborted` across the await; read it through a call.
        // A stale-leader-epoch refusal is no transient failure: a retry from this epoch is refused again.
        if (isAborted(signal) || followerRetryUsed || isStaleLeaderEpoch(err)) throw err;
        // A follower is not a new trigger: one retry that bypasses the cooldown.
        followerRetryUsed = true;
        bypassCooldown = true;
        continue;
      }
    }
    if (c.starting !== undefined) {
      // held but not ready and no load in flight: wait for whatever holds it
      await s.settleWaiters.wait(c.starting, signal);
      continue;
    }
    // Nothing routable, and the journal's replicas on nodes not heard from since
    // the restart already fill max: another load could exceed it once they
    // report. The caller sees the node, as for an unreachable one.
    if (c.unconfirmed > 0 && c.live >= Math.max(1, spec.replicas.max)) throw unconfirmedOnly(s, spec);
    if (!bypassCooldown) {
      const retryAfterMs = s.cooldown.retryAfterMs(spec.id, s.o.clock.now());
      if (retryAfterMs > 0) {
        throw new WardenError(Code.ResourceExhausted, `model "${spec.id}" is in load-failure cooldown; retry after ${String(Math.ceil(retryAfterMs))}ms`, {
          details: { model: spec.id, retryAfterMs: Math.ceil(retryAfterMs) },
        });
      }
    }
    return await raceSignal(startLoad(s, spec, nodeId, undefined, actor), signal);
  }
}

/**
 * Starts the model's one load in flight (followers coalesce on it): an
 * on-demand load (`replica` undefined), or a replica load the scale-up or the
 * reconciler asked for. The caller checked that no load of the model is in
 * flight. `actor`: who asked (an operator), stamped on the load's events;
 * followers that coalesce on the load do not change it.
 */
export function startLoad<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, nodeId: string | undefined, replica: ReplicaLoad | undefined, actor?: string): Promise<HeldInstance<H>> {
  const p = lead(s, spec, nodeId, replica, actor);
  s.loads.set(spec.id, p);
  const cleanup = (): void => {
    if (s.loads.get(spec.id) === p) s.loads.delete(spec.id);
  };
  p.then(cleanup, cleanup);
  return p;
}

/** Why a replica load was started, and how many replicas it must not exceed. */
export interface ReplicaLoad {
  readonly cause: "min" | "in-flight" | "drain";
  /** The load is not needed (dropped before admission) once this many replicas count. */
  readonly upTo: number;
}

/** The leader of a load. Not tied to any caller's signal: followers may outlive the first caller. */
async function lead<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, preferredNode: string | undefined, replica: ReplicaLoad | undefined, actor: string | undefined): Promise<HeldInstance<H>> {
  const by = actor === undefined ? {} : { actor };
  const ctl = new AbortController();
  const deadline = deadlineSignal(s.o.clock, spec.loadTimeoutMs, `load of model "${spec.id}"`, ctl.signal);
  const incarnation = s.o.mintIncarnation();
  s.loadControllers.set(incarnation, ctl);
  s.loadIncarnations.set(spec.id, incarnation);
  const startedAtMs = s.o.clock.now();
  let nodeId: string | undefined;
  let registered = false;
  let h: HeldInstance<H> | undefined;
  let release: (() => void) | undefined;
  try {
    // Shared lifecycle lock for the whole load, admission included: a stop of
    // this model waits for it or times out; a stop never cancels a load.
    // The lock is this incarnation's own: other replicas of the model load
    // and stop independently.
    release = await s.locks.shared(incarnation, deadline.signal);
    if (s.o.admissionGate !== undefined) await raceSignal(s.o.admissionGate, deadline.signal);
    // Adopted while we waited at the gate: no second copy.
    const now = chooseReplica(s, spec.id);
    const served = replica === undefined ? servedMeanwhile(s, spec) : undefined;
    if (served !== undefined) {
      s.loadControllers.delete(incarnation);
      return served;
    }
    if (replica !== undefined && replicaNotNeeded(now, s.models.get(spec.id) ?? spec, replica)) throw new WardenError(Code.Aborted, `replica load of model "${spec.id}" not needed any more`);
    const admitted = await admit(s, spec, incarnation, preferredNode, deadline.signal, replica);
    if (typeof admitted !== "string") {
      s.loadControllers.delete(incarnation);
      return admitted;
    }
    nodeId = admitted;
    const agent = s.o.agents.agent(nodeId);
    if (agent === undefined) throw new WardenError(Code.Unavailable, `node "${nodeId}" has no connected agent`);
    h = {
      incarnation,
      model: spec.id,
      nodeId,
      spec,
      placement: s.o.agents.isLocal(nodeId) ? "local" : "local-remote",
      phase: "starting",
      address: undefined,
      backend: undefined,
      gpu: undefined,
      startedAtMs,
    };
    holdInstance(s, h);
    if (replica !== undefined) {
      s.o.events.emit({ type: "replica.scaled-up", nodeId, model: spec.id, address: "", incarnation, cause: replica.cause, replicas: chooseReplica(s, spec.id).live });
    }
    let failure: StartEvent | undefined;
    const stream = agent.startBackend(
      { incarnation, model: spec.id, backend: spec.backend, options: spec.options, modelFile: spec.modelFile, contextSize: spec.contextSize, load: spec.load, ...(actor === undefined ? {} : { requestedBy: actor }) },
      { signal: deadline.signal },
    );
    for await (const ev of stream) {
      // Dropped meanwhile (its node lost, an operator's forget): the load is
      // abandoned — registering it now would make a record nothing holds.
      if (s.held.get(incarnation) !== h) throw new WardenError(Code.Canceled, `load of model "${spec.id}" abandoned: its instance was dropped (node lost or forgotten)`);
      switch (ev.t) {
        case "spawned":
          if (registered) break;
          h.address = ev.address;
          h.gpu = ev.gpu;
          h.phase = "loading";
          if (ev.reportFloor !== undefined) h.reportFloor = ev.reportFloor;
          retireRecycledAddress(s, nodeId, ev.address, incarnation);
          s.core.registerLoading({ nodeId, model: spec.id, incarnation, address: ev.address, ...pinsAndGroupsNow(s, spec), sizeBytes: spec.sizeBytes, ...(ev.gpu === undefined ? {} : { gpu: ev.gpu }) });
          registered = true;
          break;
        case "loading":
          break;
        case "ready":
          if (h.address === undefined) h.address = ev.address;
          if (!registered) {
            retireRecycledAddress(s, nodeId, ev.address, incarnation);
            s.core.registerLoading({ nodeId, model: spec.id, incarnation, address: ev.address, ...pinsAndGroupsNow(s, spec), sizeBytes: spec.sizeBytes });
            registered = true;
          }
          h.backend = s.o.backends.connect(ev.address, { nodeId, model: spec.id });
          h.phase = "ready";
          s.core.markReady(incarnation);
          break;
        case "failed":
          failure = ev;
          break;
      }
      if (failure !== undefined || h.phase === "ready") break;
    }
    if (failure?.t === "failed") {
      throw new WardenError(Code.FailedPrecondition, `load of model "${spec.id}" failed: ${failure.message}`, {
        details: { startFailure: failure.code, exitCode: failure.exitCode, lastStderrLine: failure.lastStderrLine },
      });
    }
    if (h.phase !== "ready") {
      if (deadline.signal.aborted) throw WardenError.from(deadline.signal.reason);
      throw new WardenError(Code.Unavailable, `load of model "${spec.id}": the agent ended the start without ready`);
    }
    s.cooldown.recordSuccess(spec.id);
    s.o.events.emit({ type: "backend.loaded", nodeId, model: spec.id, address: h.address ?? "", incarnation, loadDurationMs: Math.round(s.o.clock.now() - startedAtMs), ...by });
    return h;
  } catch (err) {
    const e = WardenError.from(err);
    failLoad(s, spec, incarnation, nodeId, h, registered, e, ctl.signal.aborted, by);
    throw e;
  } finally {
    release?.();
    deadline.cleanup();
    s.loadControllers.delete(incarnation);
    if (s.loadIncarnations.get(spec.id) === incarnation) s.loadIncarnations.delete(spec.id);
  }
}

/** Every failed load leaves nothing behind: no watchdog entry, no held entry, no reservation; a spawned process is stopped. */
function failLoad<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, nodeId: string | undefined, h: HeldInstance<H> | undefined, registered: boolean, e: WardenError, cancelled: boolean, by: { readonly actor?: string }): void {
  const address = h?.address ?? "";
  // Dropped meanwhile (node lost, operator's forget): whoever dropped it
  // settled its accounting, and the incarnation may have been adopted again
  // since — nothing of it is this load's to undo.
  const ours = h === undefined || s.held.get(incarnation) === h;
  const pendingStop = registered && s.core.instance(incarnation)?.pendingEviction !== undefined;
  if (!ours) {
    // nothing to drop or release
  } else if (!pendingStop) {
    dropHeld(s, incarnation);
    if (registered) s.core.remove(incarnation);
    else s.core.releaseReservation(incarnation);
  } else {
    // The load is over, so it no longer counts for hasModelAtAddress: the
    // pending stop settles by row 2, or row 4 (leftover, retried) if it
    // fails — never row 3, which would re-register a "loading" instance
    // that nothing will ever finish.
    dropHeld(s, incarnation);
  }
  // A start cancelled on our side (unload, shutdown) is not a load failure: no cooldown.
  // Nor is a start refused for a stale leader epoch (the agent did nothing; the model is not at fault).
  if (nodeId !== undefined && e.code !== Code.ResourceExhausted && !cancelled && !isStaleLeaderEpoch(e)) {
    s.cooldown.recordFailure(spec.id, s.o.clock.now());
  }
  // Sent (held), no Spawned seen: the process may run there. Counted before the failure is
  // journaled, and the journal says so, so that a coordinator taking over counts it too.
  const outcomeUnknown = ours && h !== undefined && !registered && address === "" && nodeId !== undefined && countUnknownOutcomeStart(s, { incarnation, nodeId, model: spec.id }, e, cancelled);
  if (nodeId !== undefined) {
    s.o.events.emit({
      type: "backend.load-failed",
      nodeId,
      model: spec.id,
      address,
      incarnation,
      code: typeof e.details["startFailure"] === "string" ? e.details["startFailure"] : String(e.code),
      message: e.rawMessage,
      exitCode: typeof e.details["exitCode"] === "number" ? e.details["exitCode"] : undefined,
      lastStderrLine: typeof e.details["lastStderrLine"] === "string" ? e.details["lastStderrLine"] : "",
      outcomeUnknown,
      ...by,
    });
  }
  // A start abandoned on our side (deadline) may leave a process: stop it, and
  // track it as a leftover if that fails, so it is never forgotten. So does a
  // spawn whose registration the watchdog refused (an address is known, yet
  // nothing was registered): that process runs, and nothing else accounts it.
  const abandoned = registered && !pendingStop && (e.code === Code.DeadlineExceeded || e.code === Code.Canceled || e.code === Code.Unavailable);
  const refused = !registered && address !== "";
  if (ours && address !== "" && nodeId !== undefined && (abandoned || refused)) {
    // Accounted as a leftover at once (never a gap where it counts nowhere);
    // the tracker's retry stops it and reports it reaped.
    void s.o.journal.recordStopIntent({ incarnation, nodeId, model: spec.id, address, reason: "load-abandoned" }).catch((err: unknown) => {
      warn(s, "could not journal the stop intent of an abandoned load", { incarnation, err: String(err) });
    });
    s.leftovers.add({ incarnation, nodeId, model: spec.id, address, groups: spec.groups, sizeBytes: spec.sizeBytes, lastError: `load abandoned: ${e.rawMessage}` });
  }
}

/**
 * The model's groups and pin as configured now. Admission and registration
 * apply them to the watchdog's policy (applyModelConfig), and a load may
 * outlive a config reload (admission retries, a slow start): its own copy of
 * the spec would set the old pin again — seed 28: a reload unpinned m5, a
 * replica load started before it pinned m5 again at its admission, and the
 * stale pin let m2 past the per-node limit by the pins-only rule.
 */
function pinsAndGroupsNow<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): { readonly groups: readonly string[]; readonly pinned: boolean } {
  const now = s.models.get(spec.id) ?? spec;
  return { groups: now.groups, pinned: now.pinned };
}

/**
 * Admission with the need-more retry loop (localai-semantics §4.2),
 * re-planning placement on every attempt. Pending evictions settle before an
 * attempt resolves. When attempts run out the load fails with
 * FAILED_PRECONDITION naming what blocks it.
 */
async function admit<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, preferredNode: string | undefined, signal: AbortSignal, replica: ReplicaLoad | undefined): Promise<string | HeldInstance<H>> {
  let lastReason: string;
  // The last refusal was (also) for instances a node not heard from since the
  // restart may run: it ends when that node reports or is lost — a transient
  // state, answered UNAVAILABLE (retry), never a permanent refusal.
  let unconfirmedOn: string | undefined;
  // The last attempt's failure is the cluster's state, not the model's: no node ready, or nodes the
  // journal expects (a takeover) not reported yet. Fails UNAVAILABLE (retry), not FAILED_PRECONDITION.
  let transient: boolean;
  for (let attempt = 1; ; attempt++) {
    if (signal.aborted) throw WardenError.from(signal.reason);
    if (replica !== undefined) replicaStillWanted(s, spec, replica);
    // An on-demand load serves calls while no replica is routable; one adopted
    // during admission (a node's inventory, a restarted coordinator) serves
    // them instead: no second copy (seed 24 put a second m0, max 1, beside an
    // instance adopted during the load's admission retries).
    const adopted = replica === undefined ? servedMeanwhile(s, spec) : undefined;
    if (adopted !== undefined) return adopted;
    const choice = preferredNode === undefined ? s.o.placement.choose(spec) : { nodeId: preferredNode };
    let needMore = true;
    transient = false;
    if (choice.nodeId === undefined) {
      lastReason = choice.reason;
      transient = ("transient" in choice && choice.transient === true) || s.unconfirmed.size > 0;
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
      needMore = r.needMore;
      lastReason = `${r.cause === "group" ? "group conflict" : "limit"} on node "${choice.nodeId}": ${describeShortfall(r.shortfall)}`;
      unconfirmedOn = (r.shortfall.unconfirmed ?? 0) > 0 ? choice.nodeId : undefined;
    }
    if (attempt >= s.maxAttempts) break;
    if (needMore) await s.o.sleep(s.retryIntervalMs, signal);
  }
  if (unconfirmedOn !== undefined) {
    throw new WardenError(Code.Unavailable, `cannot load model "${spec.id}" yet: ${lastReason}; retry once node "${unconfirmedOn}" has reported`, { details: { model: spec.id, nodeId: unconfirmedOn } });
  }
  if (transient) throw new WardenError(Code.Unavailable, `cannot load model "${spec.id}" now: ${lastReason}; nodes are expected to (re)register (a coordinator that just took over waits for its agents), retry`, { details: { model: spec.id } });
  throw new WardenError(Code.FailedPrecondition, `cannot load model "${spec.id}" after ${String(s.maxAttempts)} attempts: ${lastReason}`, { details: { model: spec.id } });
}

/**
 * What serves an on-demand load's callers instead of it: a routable replica
 * adopted meanwhile, or — as ensureLoaded answers a call arriving now — one
 * on an unreachable node when the replicas, this load aside, fill max (seed
 * 2878: m2, max 1, adopted on n3; a stall made n3 unreachable before the
 * load's next attempt, which then started a second copy on n0).
 */
function servedMeanwhile<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): HeldInstance<H> | undefined {
  const c = chooseReplica(s, spec.id);
  if (c.best !== undefined) return c.best;
  // `live` counts this load (in admission).
  return c.unreachable !== undefined && c.live - 1 >= Math.max(1, spec.replicas.max) ? c.unreachable : undefined;
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
  if (replicaNotNeeded(chooseReplica(s, spec.id), s.models.get(spec.id) ?? spec, replica)) throw new WardenError(Code.Aborted, `replica load of model "${spec.id}" not needed any more`);
  const inv = s.o.inventories.findModel(spec.id);
  if (inv.t === "unknown" && inv.noInventoryYet === true) throw new WardenError(Code.Aborted, `replica load of model "${spec.id}" deferred: ${inv.reason}`);
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

function unconfirmedOnly<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): WardenError {
  const first = s.unconfirmed.ofModel(spec.id).next();
  const nodeId = first.done === true ? "" : first.value.nodeId;
  return new WardenError(Code.Unavailable, `model "${spec.id}" runs on node "${nodeId}" as far as the journal knows, and that node has not reported since this coordinator started; retry later`, { details: { nodeId, model: spec.id } });
}

function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}
