import { Code, WardenError, deadlineSignal } from "@warden/common";
import type { ExplicitStopOptions } from "@warden/watchdog";
import { adoptLeftover, adoptRemoteOnly } from "./adoption.js";
import type { LoaderState } from "./loader-state.js";
import type { UnloadOutcome } from "./loader-types.js";
import type { BackendHandle } from "./ports.js";

// Unloading (DESIGN §3.3, §4): an explicit stop of a model or an instance,
// through the watchdog, returning the real outcome.

export interface UnloadOptions {
  readonly force: boolean;
  readonly stopTimeoutMs?: number;
  readonly reason?: ExplicitStopOptions["reason"];
  /** Who asked (an operator's principal, as the coordinator names it): stamped on the stop's eviction.started. */
  readonly actor?: string;
}

/**
 * Unloads a model — every replica, each through its own stop sequence, at
 * once — and returns the real outcome. A failure at the lifecycle lock or
 * the busy wait throws DEADLINE_EXCEEDED with LocalAI's message; a failed
 * StopBackend returns `registered-again` (local) or `leftover`. With several
 * replicas the answer is the worst of theirs (leftover, then registered
 * again, then stopped) with every replica's outcome in `replicas`; a throw
 * comes only once every replica's stop has ended, so one failing never cuts
 * another short. A replica load still in admission is not waited for when
 * other replicas are held (it is a new start, not part of what was unloaded).
 */
export async function unload<H extends BackendHandle>(s: LoaderState<H>, modelId: string, options: UnloadOptions): Promise<UnloadOutcome> {
  const incs = [...s.replicas.of(modelId)].filter((inc) => s.core.instance(inc) !== undefined);
  const [first] = incs;
  if (first === undefined) {
    const load = s.loads.get(modelId);
    if (load !== undefined) {
      // A load in progress, not spawned yet: it holds its lifecycle lock.
      const loading = s.loadIncarnations.get(modelId);
      if (loading !== undefined) await awaitLoadLock(s, loading, modelId, options.stopTimeoutMs);
      else await load.catch(() => undefined);
      return unload(s, modelId, options);
    }
    return unloadRemoteOnly(s, modelId, options);
  }
  if (incs.length === 1) return stopInstance(s, first, options);
  const results = await Promise.allSettled(incs.map((inc) => stopInstance(s, inc, options)));
  return combineOutcomes(results);
}

const severity: Record<UnloadOutcome["t"], number> = { "not-loaded": 0, stopped: 1, "registered-again": 2, leftover: 3 };

function combineOutcomes(results: readonly PromiseSettledResult<UnloadOutcome>[]): UnloadOutcome {
  const outcomes: UnloadOutcome[] = [];
  let error: unknown;
  let failed = false;
  for (const r of results) {
    if (r.status === "fulfilled") outcomes.push(r.value);
    else if (!failed) {
      failed = true;
      error = r.reason;
    }
  }
  if (failed) throw WardenError.from(error);
  let worst: UnloadOutcome = { t: "not-loaded" };
  for (const o of outcomes) if (severity[o.t] > severity[worst.t]) worst = o;
  return { ...worst, replicas: outcomes };
}

/** Stops one instance by incarnation through the watchdog. */
export async function stopInstance<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, options: UnloadOptions): Promise<UnloadOutcome> {
  const timeout = options.stopTimeoutMs !== undefined && options.stopTimeoutMs > 0 ? { stopTimeoutMs: options.stopTimeoutMs } : {};
  if (timeout.stopTimeoutMs !== undefined || options.actor !== undefined) s.stopOverrides.set(incarnation, { ...timeout, ...(options.actor === undefined ? {} : { actor: options.actor }) });
  try {
    const r = await s.watchdog.stop(incarnation, { reason: options.reason ?? "admin", force: options.force });
    switch (r.t) {
      case "unknown":
        return { t: "not-loaded" };
      case "pending-elsewhere":
        // Every stop goes through this facade; joining is the safe answer anyway.
        await s.settleWaiters.wait(incarnation, new AbortController().signal);
        return { t: "stopped", incarnation };
      case "reserved": {
        // Admitted, not spawned: the load holds the lifecycle lock. A stop never
        // cancels a load (DESIGN §3.4 item 2): wait for it within the deadline.
        const model = s.held.get(incarnation)?.model ?? s.core.instance(incarnation)?.model;
        if (model === undefined) return { t: "not-loaded" };
        await awaitLoadLock(s, incarnation, model, options.stopTimeoutMs);
        return await stopInstance(s, incarnation, options);
      }
      case "settled": {
        const res = r.report.result;
        const outcome = r.report.outcome;
        const error = outcome.t === "failed" ? outcome.message : "";
        switch (res.row) {
          case 1:
            // Replaced on its address: gone, unless that was no evidence (onSettled made it a leftover).
            return s.leftovers.get(incarnation) === undefined ? { t: "stopped", incarnation } : { t: "leftover", incarnation, error };
          case 0:
          case 2:
            return { t: "stopped", incarnation };
          case 3:
            if (outcome.t === "failed" && outcome.code === Code.DeadlineExceeded && s.stopFailedAtLock.delete(incarnation)) {
              throw new WardenError(Code.DeadlineExceeded, error);
            }
            return { t: "registered-again", incarnation, error };
          case 4:
            return { t: "leftover", incarnation, error };
        }
      }
    }
  } finally {
    s.stopOverrides.delete(incarnation);
    s.stopFailedAtLock.delete(incarnation);
  }
}

/** Waits for the load of `incarnation` (a replica of `model`) to release its lifecycle lock, or throws LocalAI's lock message at the deadline. */
async function awaitLoadLock<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, model: string, stopTimeoutMs: number | undefined): Promise<void> {
  const timeoutMs = stopTimeoutMs !== undefined && stopTimeoutMs > 0 ? stopTimeoutMs : s.timings.stopTimeoutMs;
  const deadline = deadlineSignal(s.o.clock, timeoutMs, `stop of model "${model}"`);
  try {
    const release = await s.locks.exclusive(incarnation, deadline.signal);
    release();
  } catch {
    throw new WardenError(Code.DeadlineExceeded, `waiting to shut down model "${model}": context deadline exceeded`);
  } finally {
    deadline.cleanup();
  }
}

/**
 * DESIGN §3.3: a model the loader does not hold. Ask the inventories first;
 * "unknown" (an unreachable node's last inventory had it) is an error, never
 * not-found.
 */
async function unloadRemoteOnly<H extends BackendHandle>(s: LoaderState<H>, modelId: string, options: UnloadOptions): Promise<UnloadOutcome> {
  const answer = s.o.inventories.findModel(modelId);
  // Leftovers of this model the loader already tracks, on any node — one
  // restored from the journal on a node that has not registered yet included.
  let known: UnloadOutcome | undefined;
  for (const l of s.leftovers.ofModel(modelId)) {
    s.leftovers.retryNodeNow(l.nodeId);
    known = { t: "leftover", incarnation: l.incarnation, error: "stop already being retried" };
  }
  switch (answer.t) {
    case "absent":
      return known ?? { t: "not-loaded" };
    case "unknown":
      throw new WardenError(Code.Unavailable, `checking whether model "${modelId}" is loaded on any node: ${answer.reason}`);
    case "found": {
      let last: UnloadOutcome = known ?? { t: "not-loaded" };
      let awaited = false;
      for (const hit of answer.hits) {
        // Confirmed gone by an earlier stop: the inventory predates it.
        if (s.gone.has(hit.incarnation)) continue;
        // After a stop was awaited the answer is stale: a replica another stop confirmed
        // gone meanwhile is out of the inventory now (the gone set is bounded and may
        // have forgotten it already), so ask again before adopting it.
        if (awaited && !stillListed(s, modelId, hit.incarnation)) continue;
        if (s.leftovers.get(hit.incarnation) !== undefined) {
          // Already a leftover (retried above): never adopt it as routable.
          last = { t: "leftover", incarnation: hit.incarnation, error: "stop already being retried" };
          continue;
        }
        const spec = s.models.get(modelId);
        if (spec !== undefined && hit.ready) adoptRemoteOnly(s, spec, hit.nodeId, hit.address, hit.incarnation, "inventory");
        else {
          // Not configured any more, or not ready (a load nobody here drives, or a
          // stop already requested): stop it as a leftover. Adopted remote-only it
          // would be routable, and a stop failing at the lock or busy wait would
          // leave a backend that never reported ready serving calls (seeds 34087, 35615).
          const error = spec === undefined ? "model not configured; stop retried" : "not ready in the inventory; stop retried";
          adoptLeftover(s, { incarnation: hit.incarnation, nodeId: hit.nodeId, model: modelId, address: hit.address, lastError: error, foundBy: spec === undefined ? "unconfigured" : "stop-requested" });
          last = { t: "leftover", incarnation: hit.incarnation, error };
          continue;
        }
        awaited = true;
        last = await stopInstance(s, hit.incarnation, options);
      }
      return last;
    }
  }
}

function stillListed<H extends BackendHandle>(s: LoaderState<H>, modelId: string, incarnation: string): boolean {
  const now = s.o.inventories.findModel(modelId);
  return now.t === "found" && now.hits.some((h) => h.incarnation === incarnation);
}
