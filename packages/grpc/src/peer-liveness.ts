import { Code, WardenError, abortReason, type AbortLike } from "@warden/common";
import { unresponsiveTransport } from "./call-never-sent.js";
import type { H2Connection, SessionSlot } from "./h2-connection.js";
import type { CallOptions } from "./types.js";

/** The earlier of a call's relative and absolute deadlines (epoch ms), if any. */
export function callDeadlineOf(opts: CallOptions | undefined): number | undefined {
  if (opts === undefined) return undefined;
  const t = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
  const d = opts.deadlineAtMs;
  if (t === undefined) return d;
  return d === undefined ? t : Math.min(t, d);
}

/**
 * Resolves once the server behind `conn` is known to answer (heard within a
 * quarter `withinMs`, else its SETTINGS or a PING answered within `withinMs`,
 * cut short by the call's deadline); nothing of the call may be sent before.
 * Rejects with the call's abort reason, DEADLINE_EXCEEDED, or UNAVAILABLE
 * marked never-sent (and silent, when the server did not answer at all).
 */
export async function whenPeerAnswers(conn: H2Connection, authority: string, opts: CallOptions | undefined, withinMs: number, signal: AbortLike | undefined = opts?.signal): Promise<void> {
  const deadlineAtMs = callDeadlineOf(opts);
  const boundMs = deadlineAtMs === undefined ? withinMs : Math.max(0, Math.min(withinMs, deadlineAtMs - Date.now()));
  try {
    await conn.whenAnswering(boundMs, withinMs / 4, signal);
  } catch (err) {
    if (signal?.aborted === true) throw abortReason(signal);
    if (deadlineAtMs !== undefined && Date.now() >= deadlineAtMs) throw new WardenError(Code.DeadlineExceeded, `deadline exceeded waiting for ${authority} to answer`);
    throw WardenError.from(err, Code.Unavailable);
  }
}

/**
 * The error of a call whose server went silent after the request was sent:
 * nothing heard (no PING answered, no response) for `withinMs`. Before the
 * response began it may still run the call if it resumes; after, the stream
 * it was serving stops here (a paused coordinator's WatchEvents).
 */
export function unresponsiveError(authority: string, withinMs: number, responding: boolean): WardenError {
  const what = responding ? "stopped answering mid-response" : "did not answer";
  const after = responding ? "" : " after the call was sent";
  return new WardenError(Code.Unavailable, `the server at ${authority} ${what} within ${String(withinMs)} ms${after} (paused, or its event loop blocked); it may still run the call if it resumes`, {
    details: { transport: unresponsiveTransport, silent: "true" },
  });
}

/**
 * Watches one call's server for as long as the call runs (the whole call,
 * streams included: a server stream whose member freezes after its first
 * message must end too, not hang). Every quarter `withinMs` it checks when
 * the server was last heard from on `slotOf()`'s session (SETTINGS, a PING's
 * answer, a response header) and PINGs it when that is older than a quarter
 * `withinMs` (one PING in flight per session, however many calls watch it);
 * when nothing was heard for `withinMs`, it calls `onSilent` once and stops.
 * A live server that is slow to answer is not cut: it answers the PINGs.
 * `slotOf` is asked on every check: a liveness-only side connection that the
 * server closed (its idle timeout) is replaced, and what was heard on the old
 * one still counts. Returns the function that stops watching.
 */
export function watchPeer(slotOf: () => SessionSlot | undefined, withinMs: number, onSilent: () => void): () => void {
  let heardAtMs = performance.now();
  const freshMs = withinMs / 4;
  const timer = setInterval(
    () => {
      const slot = slotOf();
      if (slot !== undefined) heardAtMs = Math.max(heardAtMs, slot.heardAtMs);
      if (performance.now() - heardAtMs > withinMs) {
        clearInterval(timer);
        onSilent();
        return;
      }
      slot?.pingIfStale(freshMs);
    },
    Math.max(25, freshMs),
  );
  return () => {
    clearInterval(timer);
  };
}
