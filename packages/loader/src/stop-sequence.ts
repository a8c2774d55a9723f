import { Code, WardenError, deadlineSignal, isPlanted, isStaleLeaderEpoch, isWardenError } from "@warden/common";
import type { SettleReport, SettleResult, StopCommand, StopOutcome } from "@warden/watchdog";
import type { Leftover } from "./leftover-tracker.js";
import { rememberGone } from "./adoption.js";
import { clearIntent, dropHeld, holdInstance, warn, type LoaderState } from "./loader-state.js";
import type { BackendHandle } from "./ports.js";

// The stop sequence (DESIGN §3.3) for every eviction path, its settle, and
// the stop retries of leftovers.

/**
 * DESIGN §3.3, for one selected victim: (1) exclusive lifecycle lock within
 * the stop deadline; (2) graceful: busy wait on the watchdog's in-flight
 * count; (3) graceful: Free() through the node's agent — the only Free of a
 * stop, fenced by the agent's leader epoch; (4) stop intent,
 * durable; (5) local+remote / remote-only: drop the local half; (6)
 * StopBackend(address, incarnation, force). Resolves with the outcome; the
 * watchdog settles it in the same turn.
 */
export async function stopSequence<H extends BackendHandle>(s: LoaderState<H>, c: StopCommand): Promise<StopOutcome> {
  const override = s.stopOverrides.get(c.incarnation);
  await s.o.events.emitDurable({
    type: "eviction.started",
    nodeId: c.nodeId,
    model: c.model,
    address: c.address,
    incarnation: c.incarnation,
    reason: c.reason,
    trigger: c.trigger ?? "",
    wasBusy: c.wasBusy,
    force: c.force,
    openRequestIds: c.openRequestIds.map(String),
    ...(override?.actor === undefined ? {} : { actor: override.actor }),
  });
  // The flag describes this stop only: a stale one (from a stop that did not go through stopInstance) would misreport it.
  s.stopFailedAtLock.delete(c.incarnation);
  const stopTimeoutMs = override?.stopTimeoutMs ?? s.timings.stopTimeoutMs;
  const deadline = deadlineSignal(s.o.clock, stopTimeoutMs, `stop of model "${c.model}"`);
  let freed = false;
  try {
    // (1) lifecycle lock
    let release: () => void;
    try {
      // This replica's own lock: a stop of one replica never waits for, nor blocks, another.
      release = await s.locks.exclusive(c.incarnation, deadline.signal);
    } catch {
      s.stopFailedAtLock.add(c.incarnation);
      return { t: "failed", message: `waiting to shut down model "${c.model}": context deadline exceeded`, code: Code.DeadlineExceeded, freed: false };
    }
    try {
      const h = s.held.get(c.incarnation);
      if (!c.force && c.address !== "" && !processGone(s, c)) {
        // (2) busy wait
        while (s.core.inFlight(c.address) > 0 && !processGone(s, c)) {
          if (deadline.signal.aborted) {
            s.stopFailedAtLock.add(c.incarnation);
            return { t: "failed", message: `model is still busy: ${c.model}: context deadline exceeded`, code: Code.DeadlineExceeded, freed: false };
          }
          await s.o.sleep(s.timings.busyPollMs, deadline.signal).catch(() => undefined);
        }
        // (3) Free through the node's agent, whose leader-epoch fence judges it
        // as it judges StopBackend (a Free straight to the backend would pass
        // no fence: a resumed ex-leader could unload a model). Capped;
        // UNIMPLEMENTED (an agent or backend without Free) is fine, any other
        // error only logged. Sent for a backend this coordinator holds a
        // client for, as before the Free moved to the agent.
        if (h?.backend !== undefined && !processGone(s, c)) {
          try {
            const agent = s.o.agents.agent(c.nodeId);
            if (agent === undefined) throw new WardenError(Code.Unavailable, `node "${c.nodeId}" has no connected agent`);
            const ans = await agent.freeBackend({ address: c.address, incarnation: c.incarnation, ...(override?.actor === undefined ? {} : { requestedBy: override.actor }) }, { signal: deadline.signal, timeoutMs: s.timings.freeTimeoutMs });
            freed = ans.t === "freed";
          } catch (err) {
            // A newer leader fences this coordinator: the agent did nothing and
            // would refuse the StopBackend too. Nothing was dropped or
            // journaled yet: the instance stays held, the watchdog settles by
            // row 3 (as for a refused StopBackend below).
            if (isStaleLeaderEpoch(err)) {
              const e = WardenError.from(err);
              return { t: "failed", message: e.rawMessage, code: e.code, freed: false };
            }
            if (!isWardenError(err, Code.Unimplemented)) warn(s, "Free failed; stopping anyway", { model: c.model, incarnation: c.incarnation, err: String(err) });
          }
        }
      }
      // (4) stop intent, durable before anything is dropped or sent
      await s.o.journal.recordStopIntent({ incarnation: c.incarnation, nodeId: c.nodeId, model: c.model, address: c.address, reason: c.reason });
      // (5) drop the local half of a remote placement first, so a failed
      // StopBackend leaves no phantom (settle row 4 → leftover)
      const placement = h?.placement ?? "remote-only";
      // Planted bug "report-remote-failure-before-drop": the local half is dropped only once the stop succeeded.
      const dropAfter = placement === "local" || isPlanted("report-remote-failure-before-drop");
      if (!dropAfter) dropHeld(s, c.incarnation);
      // (6) StopBackend
      const agent = s.o.agents.agent(c.nodeId);
      try {
        if (agent === undefined) throw new WardenError(Code.Unavailable, `node "${c.nodeId}" has no connected agent`);
        const rpc = new AbortController();
        const ans = await s.stopRpcs.send(agent, { address: c.address, incarnation: c.incarnation, force: c.force, reason: c.reason, ...(override?.actor === undefined ? {} : { requestedBy: override.actor }) }, { signal: rpc.signal, timeoutMs: s.timings.stopRpcTimeoutMs });
        if (dropAfter) dropHeld(s, c.incarnation);
        await clearIntent(s, c.incarnation);
        return ans.t === "stopped" ? { t: "stopped" } : { t: "alreadyGone" };
      } catch (err) {
        const e = WardenError.from(err);
        if (e.code === Code.NotFound) {
          if (dropAfter) dropHeld(s, c.incarnation);
          await clearIntent(s, c.incarnation);
          return { t: "alreadyGone" };
        }
        if (isStaleLeaderEpoch(e)) {
          // A newer leader fences this coordinator: the agent
          // refused the stop whole and changed nothing, so the process runs
          // exactly as before — not stopped by us, whatever the placement.
          // The local half dropped at (5) comes back (its backend client is
          // reconnected on the next route) and the watchdog settles by row 3;
          // nothing was sent that could act, so no intent is kept, and no
          // leftover is made to retry a refusal that a retry cannot change.
          if (h !== undefined && !s.held.has(c.incarnation) && !s.gone.has(c.incarnation)) holdInstance(s, h);
          await clearIntent(s, c.incarnation);
          return { t: "failed", message: e.rawMessage, code: e.code, freed };
        }
        if (placement === "local" && agent !== undefined) {
          // An already-dead process owns no resources: row 2. Alive: keep it, row 3.
          const alive = await agent.isRunning(c.incarnation, { signal: new AbortController().signal }).catch(() => true);
          if (!alive) {
            dropHeld(s, c.incarnation);
            await clearIntent(s, c.incarnation);
            return { t: "stopped" };
          }
          await clearIntent(s, c.incarnation);
        }
        // local alive → row 3 (held); remote → row 4 (dropped), intent kept until reaped
        return { t: "failed", message: e.rawMessage, code: e.code, freed, bug: e.code === Code.InvalidArgument || e.code === Code.PermissionDenied };
      }
    } finally {
      release();
    }
  } catch (err) {
    const e = WardenError.from(err);
    return { t: "failed", message: e.rawMessage, code: e.code, freed };
  } finally {
    deadline.cleanup();
  }
}

/**
 * The stopped process has exited (the agent said so) or its port now serves
 * another incarnation. Then the graceful steps are moot and harmful: the
 * address's in-flight count is the new process's, and Free() — a call with no
 * identity — would unload the new process's model. StopBackend names the
 * incarnation, so it still goes out and the agent answers for the right one.
 */
function processGone<H extends BackendHandle>(s: LoaderState<H>, c: StopCommand): boolean {
  if (s.core.instance(c.incarnation)?.pendingEviction?.exited === true) return true;
  const at = s.core.instanceAt(c.address);
  return at !== undefined && at.incarnation !== c.incarnation;
}

/** How long the stop took, from its selection; never negative. */
function stopDurationMs<H extends BackendHandle>(s: LoaderState<H>, c: StopCommand): number {
  return Math.max(0, Math.round(s.o.clock.now() - c.atMs));
}

/**
 * Applies a settled stop to the local half, per row of the settle table
 * (DESIGN §3.2 step 4): row 1 gone (or a leftover, see `settleReplaced`),
 * row 2 gone, row 3 registered again (a freed one retried), row 4 dropped and
 * tracked as a leftover. Then wakes the callers
 * waiting for this incarnation's settle.
 */
export function onSettled<H extends BackendHandle>(s: LoaderState<H>, r: SettleReport): void {
  const c = r.command;
  const res = r.result;
  const base = { nodeId: c.nodeId, model: c.model, address: c.address, incarnation: c.incarnation };
  switch (res.row) {
    case 0:
      break;
    case 1:
      settleReplaced(s, r, res);
      break;
    case 2:
      rememberGone(s, c.incarnation, c.nodeId);
      s.freedRetries.cancel(c.incarnation);
      dropHeld(s, c.incarnation);
      s.o.events.emit({ type: "eviction.stopped", ...base, reason: c.reason, alreadyGone: r.outcome.t === "alreadyGone", stopDurationMs: stopDurationMs(s, c) });
      break;
    case 3:
      s.o.events.emit({ type: "eviction.failed", ...base, reason: c.reason, error: res.error, outcome: "registered-again", openRequestIds: [], terminalReason: "" });
      if (res.state === "freed") s.freedRetries.schedule(c.incarnation);
      break;
    case 4: {
      s.freedRetries.cancel(c.incarnation);
      dropHeld(s, c.incarnation);
      const spec = s.models.get(c.model);
      s.leftovers.add({ incarnation: c.incarnation, nodeId: c.nodeId, model: c.model, address: c.address, groups: spec?.groups ?? res.instance.groups, sizeBytes: spec?.sizeBytes ?? res.instance.sizeBytes, lastError: res.error });
      s.o.events.emit({ type: "eviction.failed", ...base, reason: c.reason, error: res.error, outcome: "leftover", openRequestIds: res.openRequestIds.map(String), terminalReason: res.terminalReason });
      break;
    }
  }
  s.settleWaiters.wake(c.incarnation);
}

/**
 * Row 1: a later incarnation was registered on the address while this stop
 * ran, and the watchdog forgot this one. The loader ends the eviction too —
 * one terminal event — and keeps no held entry the watchdog no longer counts.
 * A confirmed stop is gone. So is a failed one when the replacement is on the
 * same node: the agent hands a port out again only after its process exited
 * (see `retireRecycledAddress`). Without that evidence (the same address on
 * another node) it becomes a leftover, its stop retried, intent kept.
 */
function settleReplaced<H extends BackendHandle>(s: LoaderState<H>, r: SettleReport, res: Extract<SettleResult, { readonly row: 1 }>): void {
  const c = r.command;
  const base = { nodeId: c.nodeId, model: c.model, address: c.address, incarnation: c.incarnation };
  // A load still running for it ends now (its loop sees the entry dropped; this makes it prompt).
  s.loadControllers.get(c.incarnation)?.abort(new WardenError(Code.Canceled, `load abandoned: address ${c.address} now serves incarnation ${res.replacedBy}`));
  s.freedRetries.cancel(c.incarnation);
  dropHeld(s, c.incarnation);
  const o = r.outcome;
  if (o.t !== "failed" || s.core.instance(res.replacedBy)?.nodeId === c.nodeId) {
    rememberGone(s, c.incarnation, c.nodeId);
    void clearIntent(s, c.incarnation);
    s.o.events.emit({ type: "eviction.stopped", ...base, reason: c.reason, alreadyGone: o.t !== "stopped", stopDurationMs: stopDurationMs(s, c) });
    return;
  }
  const error = o.message;
  const spec = s.models.get(c.model);
  s.leftovers.add({ incarnation: c.incarnation, nodeId: c.nodeId, model: c.model, address: c.address, groups: spec?.groups ?? res.instance.groups, sizeBytes: spec?.sizeBytes ?? res.instance.sizeBytes, lastError: error });
  s.o.events.emit({ type: "eviction.failed", ...base, reason: c.reason, error, outcome: "leftover", openRequestIds: [], terminalReason: "" });
}

/** One stop retry of a leftover (the tracker schedules it): NOT_FOUND counts as gone. */
export async function retryLeftover<H extends BackendHandle>(s: LoaderState<H>, l: Leftover): Promise<{ readonly gone: true } | { readonly gone: false; readonly error: string }> {
  const agent = s.o.agents.agent(l.nodeId);
  if (agent === undefined) return { gone: false, error: `node "${l.nodeId}" has no connected agent` };
  try {
    await s.stopRpcs.send(agent, { address: l.address, incarnation: l.incarnation, force: true, reason: "leftover" }, { signal: new AbortController().signal, timeoutMs: s.timings.stopRpcTimeoutMs });
  } catch (err) {
    const e = WardenError.from(err);
    if (e.code !== Code.NotFound) return { gone: false, error: e.rawMessage };
  }
  await clearIntent(s, l.incarnation);
  return { gone: true };
}
