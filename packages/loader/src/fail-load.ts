import { Code, isStaleLeaderEpoch, type WardenError } from "@warden/common";
import { dropHeld, warn, type LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { countUnknownOutcomeStart } from "./unknown-outcome-start.js";

/** Every failed load leaves nothing behind: no watchdog entry, no held entry, no reservation; a spawned process is stopped. */
export function failLoad<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, incarnation: string, nodeId: string | undefined, h: HeldInstance<H> | undefined, registered: boolean, e: WardenError, cancelled: boolean, by: { readonly actor?: string }): void {
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
