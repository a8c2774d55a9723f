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
}

/**
 * Unloads a model and returns the real outcome. A failure at the lifecycle
 * lock or the busy wait throws DEADLINE_EXCEEDED with LocalAI's message; a
 * failed StopBackend returns `registered-again` (local) or `leftover`.
 */
export async function unload<H extends BackendHandle>(s: LoaderState<H>, modelId: string, options: UnloadOptions): Promise<UnloadOutcome> {
  const inc = s.current.get(modelId);
  if (inc === undefined || s.core.instance(inc) === undefined) {
    if (s.loads.has(modelId)) {
      // A load in progress, not spawned yet: it holds the lifecycle lock.
      await awaitLoadLock(s, modelId, options.stopTimeoutMs);
      return unload(s, modelId, options);
    }
    return unloadRemoteOnly(s, modelId, options);
  }
  return stopInstance(s, inc, options);
}

/** Stops one instance by incarnation through the watchdog. */
export async function stopInstance<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, options: UnloadOptions): Promise<UnloadOutcome> {
  if (options.stopTimeoutMs !== undefined && options.stopTimeoutMs > 0) s.stopOverrides.set(incarnation, { stopTimeoutMs: options.stopTimeoutMs });
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
        await awaitLoadLock(s, model, options.stopTimeoutMs);
        return await unload(s, model, options);
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

/** Waits for a load of `model` to release the lifecycle lock, or throws LocalAI's lock message at the deadline. */
async function awaitLoadLock<H extends BackendHandle>(s: LoaderState<H>, model: string, stopTimeoutMs: number | undefined): Promise<void> {
  const timeoutMs = stopTimeoutMs !== undefined && stopTimeoutMs > 0 ? stopTimeoutMs : s.timings.stopTimeoutMs;
  const deadline = deadlineSignal(s.o.clock, timeoutMs, `stop of model "${model}"`);
  try {
    const release = await s.locks.exclusive(model, deadline.signal);
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
      for (const hit of answer.hits) {
        // Confirmed gone by an earlier stop: the inventory predates it.
        if (s.gone.has(hit.incarnation)) continue;
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
        last = await stopInstance(s, hit.incarnation, options);
      }
      return last;
    }
  }
}
