import { loadDigest } from "./load-digest.js";
import { Code, WardenError, codeName, deadlineSignal, isStaleLeaderEpoch, raceSignal } from "@warden/common";
import { admitLoad, jobWaiting } from "./admit-load.js";
import { failLoad } from "./fail-load.js";
import { holdInstance, setPhase, type LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle, StartEvent } from "./ports.js";
import { ArtifactProgress } from "./artifact-progress.js";
import { chooseReplica, pickReplica } from "./replica-routing.js";
import { pinsAndGroupsNow } from "./pins-and-groups-now.js";
import { retireRecycledAddress } from "./recycled-address.js";
import { replicaNotNeeded, rolloutWanted } from "./replica-not-needed.js";
import { servedMeanwhile } from "./served-meanwhile.js";

// The load path (DESIGN §3.3): coalesced, cooldown-checked, admitted through
// the watchdog with the need-more retry loop, bounded by a deadline; a failed
// load leaves nothing behind. Admission (admit-load.ts) and the failed
// load's undo (fail-load.ts) live in their own files.

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
      await waitForInstance(s, spec, c.settling, "stop", signal, actor);
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
      await waitForInstance(s, spec, c.starting, "start", signal, actor);
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
 * Waits for the model's own instance to settle (its stop, or an adopted
 * instance's start) as a visible waiting job: one per model, whoever waits
 * (the first waiter's job; later callers wait under it), gone when the wait
 * ends, replaced by the load that may follow.
 */
async function waitForInstance<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, what: "stop" | "start", signal: AbortSignal, actor: string | undefined): Promise<void> {
  const cur = s.jobs.of(spec.id, s.o.clock.now());
  const job = cur?.t === "waiting" || cur?.t === "loading" ? undefined : s.o.mintIncarnation();
  if (job !== undefined) jobWaiting(s, spec, job, "waiting_for_instance", `its instance ${incarnation} is ${what === "stop" ? "stopping" : "starting"}; no second copy beside it`, actor);
  try {
    await s.settleWaiters.wait(incarnation, signal);
  } finally {
    if (job !== undefined) s.jobs.done(spec.id, job);
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
  s.replicaWork.mark(spec.id);
  const cleanup = (): void => {
    if (s.loads.get(spec.id) !== p) return;
    s.loads.delete(spec.id);
    s.replicaWork.mark(spec.id);
  };
  p.then(cleanup, cleanup);
  return p;
}

/** Why a replica load was started, and how many replicas it must not exceed. */
export interface ReplicaLoad {
  readonly cause: "min" | "in-flight" | "drain" | "rollout";
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
  s.replicaWork.mark(spec.id);
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
    if (s.o.admissionGate !== undefined) {
      // Held at the gate (the recovery window after a start or takeover): a waiting job, like a load no node can take now.
      if (!s.admissionOpen) jobWaiting(s, spec, incarnation, "waiting_for_recovery", recoveryReason, actor);
      await raceSignal(s.o.admissionGate, deadline.signal);
    }
    // Adopted while we waited at the gate: no second copy.
    const now = chooseReplica(s, spec.id);
    const served = replica === undefined ? servedMeanwhile(s, spec) : undefined;
    if (served !== undefined) {
      s.loadControllers.delete(incarnation);
      s.jobs.done(spec.id, incarnation);
      return served;
    }
    if (replica !== undefined && replicaNotNeeded(now, s.models.get(spec.id) ?? spec, replica, replica.cause !== "rollout" || rolloutWanted(s, spec))) throw new WardenError(Code.Aborted, `replica load of model "${spec.id}" not needed any more`);
    const admitted = await admitLoad(s, spec, incarnation, preferredNode, deadline.signal, replica, actor);
    if (typeof admitted !== "string") {
      s.loadControllers.delete(incarnation);
      s.jobs.done(spec.id, incarnation);
      return admitted;
    }
    nodeId = admitted;
    s.jobs.loading(spec.id, incarnation, nodeId, "starting", jobStamp(s), actor);
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
    const pulls = new ArtifactProgress();
    const stream = agent.startBackend(
      { incarnation, model: spec.id, backend: spec.backend, options: spec.options, modelFile: spec.modelFile, artifacts: spec.artifacts, contextSize: spec.contextSize, load: spec.load, loadDigest: loadDigest(spec), ...(actor === undefined ? {} : { requestedBy: actor }) },
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
          setPhase(s, h, "loading");
          s.jobs.loading(spec.id, incarnation, nodeId, "loading", jobStamp(s), actor);
          s.replicaWork.mark(spec.id);
          if (ev.reportFloor !== undefined) h.reportFloor = ev.reportFloor;
          retireRecycledAddress(s, nodeId, ev.address, incarnation);
          s.core.registerLoading({ nodeId, model: spec.id, incarnation, address: ev.address, ...pinsAndGroupsNow(s, spec), sizeBytes: spec.sizeBytes, ...(ev.gpu === undefined ? {} : { gpu: ev.gpu }) });
          registered = true;
          break;
        case "loading":
          break;
        case "pulling":
        case "stage": {
          // Before the spawn: the job shows a bundle's resolving, pulling (bytes of all, rate), verifying,
          // a bundle's unpacking, then starting again (artifact-progress.ts).
          const p = pulls.report(ev);
          if (p.phase === "pulling" || p.phase === "verifying") s.jobs.progress(spec.id, incarnation, nodeId, p.phase, p.doneBytes, p.totalBytes, jobStamp(s), actor);
          else s.jobs.loading(spec.id, incarnation, nodeId, p.phase, jobStamp(s), actor);
          break;
        }
        case "ready":
          if (h.address === undefined) h.address = ev.address;
          if (!registered) {
            retireRecycledAddress(s, nodeId, ev.address, incarnation);
            s.core.registerLoading({ nodeId, model: spec.id, incarnation, address: ev.address, ...pinsAndGroupsNow(s, spec), sizeBytes: spec.sizeBytes });
            registered = true;
          }
          h.backend = s.o.backends.connect(ev.address, { nodeId, model: spec.id });
          setPhase(s, h, "ready");
          s.replicaWork.mark(spec.id);
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
    s.jobs.done(spec.id, incarnation);
    s.o.events.emit({ type: "backend.loaded", nodeId, model: spec.id, address: h.address ?? "", incarnation, loadDurationMs: Math.round(s.o.clock.now() - startedAtMs), ...by });
    return h;
  } catch (err) {
    const e = WardenError.from(err);
    failLoad(s, spec, incarnation, nodeId, h, registered, e, ctl.signal.aborted, by);
    endJob(s, spec, incarnation, nodeId, e, ctl.signal.aborted, actor);
    throw e;
  } finally {
    release?.();
    deadline.cleanup();
    s.loadControllers.delete(incarnation);
    if (s.loadIncarnations.get(spec.id) === incarnation) {
      s.loadIncarnations.delete(spec.id);
      s.replicaWork.mark(spec.id);
    }
  }
}

const recoveryReason = "the coordinator's recovery window after its start or takeover: loads start once the nodes its journal names have reported (or the window ends)";

function jobStamp<H extends BackendHandle>(s: LoaderState<H>): { nowMs: number; wallMs: number } {
  return { nowMs: s.o.clock.now(), wallMs: s.o.clock.wallNow() };
}

/**
 * The load's job ends: dropped when the load was cancelled on our side
 * (unload, shutdown) or a replica load was not needed any more — nothing
 * failed; otherwise failed, with load.failed naming why and the code every
 * caller got.
 */
function endJob<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, nodeId: string | undefined, e: WardenError, cancelled: boolean, actor: string | undefined): void {
  if (cancelled || e.code === Code.Aborted) {
    s.jobs.done(spec.id, incarnation);
    return;
  }
  const code = codeName(e.code).toUpperCase();
  const phase = s.jobs.failed(spec.id, incarnation, nodeId, e.rawMessage, code, jobStamp(s), actor);
  s.o.events.emit({ type: "load.failed", nodeId: nodeId ?? "", model: spec.id, address: "", incarnation: "", loadIncarnation: incarnation, reason: e.rawMessage, code, phase, ...(actor === undefined ? {} : { actor }) });
}

function unconfirmedOnly<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec): WardenError {
  const first = s.unconfirmed.ofModel(spec.id).next();
  const nodeId = first.done === true ? "" : first.value.nodeId;
  return new WardenError(Code.Unavailable, `model "${spec.id}" runs on node "${nodeId}" as far as the journal knows, and that node has not reported since this coordinator started; retry later`, { details: { nodeId, model: spec.id } });
}

function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}
