import { Code, WardenError } from "@warden/common";
import { rememberGone } from "./adoption.js";
import { dropHeld, leftoverBase, type LoaderState } from "./loader-state.js";
import type { BackendHandle } from "./ports.js";

// Instances that leave without a stop of ours: the backend exited, its node
// was lost, or an operator forgot it.

/**
 * The agent reported the process gone (exit, or vanished from its
 * inventory): remove it through the watchdog — no phantom.
 */
export function onBackendGone<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, info: { exitCode: number | undefined; signal: string; intentional: boolean; lastStderrLine: string }): void {
  const left = s.leftovers.get(incarnation);
  if (left !== undefined) {
    s.leftovers.remove(incarnation);
    rememberGone(s, incarnation, left.nodeId);
    void s.o.journal.clearStopIntent(incarnation).catch(() => undefined);
    s.o.events.emit({ type: "leftover.reaped", ...leftoverBase(left), attempts: left.attempts });
    return;
  }
  const h = s.held.get(incarnation);
  if (h === undefined) return;
  if (h.phase !== "ready") return; // the start stream reports the failure itself
  const r = s.core.remove(incarnation);
  if (r.t === "pending") return; // the stop in flight settles it (row 2: already gone)
  s.freedRetries.cancel(incarnation);
  dropHeld(s, incarnation);
  rememberGone(s, incarnation, h.nodeId);
  s.o.events.emit({ type: "backend.exited", nodeId: h.nodeId, model: h.model, address: h.address ?? "", incarnation, ...info });
}

/**
 * A node was declared lost: its instances become leftovers there (still
 * accounted on that node, stops retried should it come back) and their
 * models may be placed elsewhere. Nothing is forgotten.
 */
export function onNodeLost<H extends BackendHandle>(s: LoaderState<H>, nodeId: string): void {
  for (const h of [...s.held.values()]) {
    if (h.nodeId !== nodeId) continue;
    const v = s.core.instance(h.incarnation);
    if (v?.pendingEviction !== undefined) continue; // its stop settles it
    abandonLoad(s, h.incarnation, `node "${nodeId}" lost`);
    s.core.remove(h.incarnation);
    s.freedRetries.cancel(h.incarnation);
    dropHeld(s, h.incarnation);
    if (h.address !== undefined) {
      s.leftovers.add({ incarnation: h.incarnation, nodeId, model: h.model, address: h.address, groups: h.spec.groups, sizeBytes: h.spec.sizeBytes, lastError: `node "${nodeId}" lost` });
    }
  }
}

/** An operator's audited word: forget a leftover or an instance on a node gone for good. Never stops anything. */
export function forget<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, operator: string, note: string): boolean {
  const left = s.leftovers.remove(incarnation);
  const h = s.held.get(incarnation);
  const v = s.core.instance(incarnation);
  if (left === undefined && h === undefined && v === undefined) return false;
  // A load in progress is abandoned with it: otherwise its next start event
  // would register a fresh record the loader no longer holds.
  abandonLoad(s, incarnation, "forgotten by an operator");
  if (v !== undefined && v.pendingEviction === undefined) s.core.remove(incarnation);
  s.freedRetries.cancel(incarnation);
  if (h !== undefined) dropHeld(s, incarnation);
  void s.o.journal.clearStopIntent(incarnation).catch(() => undefined);
  const base = left !== undefined ? leftoverBase(left) : { nodeId: h?.nodeId ?? v?.nodeId ?? "", model: h?.model ?? v?.model ?? "", address: h?.address ?? v?.address ?? "", incarnation };
  s.o.events.emit({ type: "instance.forgotten", ...base, operator, note });
  return true;
}

/** Cancels the load of `incarnation` if one is in progress (its start stream is cancelled; the load fails as cancelled). */
function abandonLoad<H extends BackendHandle>(s: LoaderState<H>, incarnation: string, why: string): void {
  s.loadControllers.get(incarnation)?.abort(new WardenError(Code.Canceled, `load abandoned: ${why}`));
}
