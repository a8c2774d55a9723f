import { Code, WardenError } from "@warden/common";
import { rememberGone } from "./adoption.js";
import { dropHeld, type LoaderState } from "./loader-state.js";
import type { BackendHandle } from "./ports.js";

/**
 * A start on `nodeId` reported `address` for `incarnation`, and the watchdog
 * still registers an older incarnation of the same node there. An agent hands
 * a port out again only once the process that held it has exited (the real
 * agent releases it on the exit or after reaping a failed start; the
 * simulated one the same), so the holder is gone and its exit notification
 * was lost or is still to come: remove it first, as `WatchdogCore.registerLoading`
 * asks (seed 14857). Its load, if one is still running, is abandoned; a
 * pending holder is not registered and is left to its stop's settle (row 1).
 *
 * Returns the incarnation retired, or undefined when nothing was (nobody at
 * the address, it is this incarnation, or it belongs to another node — no
 * evidence then; the registration is refused and the load tracks its spawned
 * process as a leftover).
 */
export function retireRecycledAddress<H extends BackendHandle>(s: LoaderState<H>, nodeId: string, address: string, incarnation: string): string | undefined {
  const stale = s.core.instanceAt(address);
  if (stale === undefined || stale.incarnation === incarnation || stale.nodeId !== nodeId) return undefined;
  // Incarnations are minted in time order: a holder minted AFTER the reporting incarnation is the
  // newer start, and this report is the late one (seed 763: a crashed start's delayed report of its
  // port retired the live load that had the port next, which was then accounted nowhere).
  if (stale.incarnation > incarnation) return undefined;
  const inc = stale.incarnation;
  const h = s.held.get(inc);
  // Its start stream would report the failure; the load is over either way and
  // must not register anything after this (its loop sees the entry dropped).
  s.loadControllers.get(inc)?.abort(new WardenError(Code.Canceled, `load abandoned: its port ${address} was given to incarnation ${incarnation}`));
  s.core.remove(inc);
  s.freedRetries.cancel(inc);
  dropHeld(s, inc);
  rememberGone(s, inc, nodeId);
  // A load in progress reports itself (backend.load-failed); a running instance exited.
  if (h === undefined || h.phase === "ready") {
    s.o.events.emit({ type: "backend.exited", nodeId, model: stale.model, address, incarnation: inc, exitCode: undefined, signal: "", intentional: false, lastStderrLine: "" });
  }
  return inc;
}
