import { Code, WardenError } from "@warden/common";

/** `details.transport` of a client-side UNAVAILABLE whose call never reached a server. */
export const notConnectedTransport = "not-connected";

/**
 * `details.transport` of a client-side UNAVAILABLE where the request was sent
 * but the server answered nothing, not even a PING, within the call's
 * `answerWithinMs`: paused (SIGSTOP) or wedged. It may run the call if it resumes.
 */
export const unresponsiveTransport = "unresponsive";

/**
 * Whether an UNAVAILABLE is one where the request never left this process:
 * no connection could be made (refused, unresolvable, closed client). Such a
 * call ran nowhere, so a client may send it to another address even when the
 * method is not idempotent. The lean client marks it with
 * `details.transport = "not-connected"`; grpc-js says "No connection
 * established" (its picker fails the call before sending it).
 */
export function callNeverSent(err: unknown): boolean {
  if (!(err instanceof WardenError) || err.code !== Code.Unavailable) return false;
  if (err.details["transport"] === notConnectedTransport) return true;
  return /^(\w+: )?No connection established/.test(err.rawMessage);
}

/**
 * Whether an UNAVAILABLE says the server answered nothing within the call's
 * `answerWithinMs` (before or after the request was sent: `details.silent`):
 * a paused or wedged process, which costs a caller that bound again on every
 * try. A refused or dropped connection fails fast and is not one.
 */
export function serverWasSilent(err: unknown): boolean {
  return err instanceof WardenError && err.code === Code.Unavailable && err.details["silent"] === "true";
}
