import { Code, WardenError } from "@warden/common";

/**
 * Exit codes that mean something to scripts:
 * 0 ok · 1 other error · 2 bad usage or INVALID_ARGUMENT · 3 Warden unreachable
 * or not able now (UNAVAILABLE: retry — no member answered, a member did not
 * answer in time, a failover is under way, no node can take the model now —
 * none ready, its only matching node draining or unreachable — after the
 * coordinator's loadWait) · 4 NOT_FOUND · 5 DEADLINE_EXCEEDED · 6 RESOURCE_EXHAUSTED
 * (cooldown, caps) · 7 FAILED_PRECONDITION (cannot load: ready nodes judged
 * the model and none can take it; busy — retrying as is will not help) · 8 the
 * operation finished but did not do what was asked (e.g. an unload that left
 * the instance registered again or as a leftover) · 9 UNAUTHENTICATED or
 * PERMISSION_DENIED (no token, an unknown one, or a role that may not).
 */
export const exitCodes = { ok: 0, error: 1, usage: 2, unavailable: 3, notFound: 4, deadline: 5, exhausted: 6, precondition: 7, incomplete: 8, denied: 9 } as const;

export const exitCodeHelp = `Exit codes: 0 ok, 1 error, 2 bad usage / invalid argument, 3 Warden unreachable
or not able now: retry (no coordinator answered or one did not answer within 2 s, a
failover is under way, or no node can take the model now — none registered, or its
only matching node draining or unreachable — after the coordinator's loadWait,
default 30 s; meanwhile the progress line says "waiting for a node: <reason>"),
4 not found, 5 deadline exceeded, 6 resource exhausted (cooldown, caps),
7 failed precondition: ready nodes judged the model and none can take it, or busy
(retrying unchanged will not help), 8 done but not as asked
(e.g. an unload that left the instance registered again or as a leftover),
9 no or unknown token, or its role may not do this (set WARDEN_TOKEN or --token-file).`;

export function exitCodeOf(err: unknown): number {
  const e = WardenError.from(err);
  switch (e.code) {
    case Code.InvalidArgument:
      return exitCodes.usage;
    case Code.Unavailable:
      return exitCodes.unavailable;
    case Code.NotFound:
      return exitCodes.notFound;
    case Code.DeadlineExceeded:
      return exitCodes.deadline;
    case Code.ResourceExhausted:
      return exitCodes.exhausted;
    case Code.FailedPrecondition:
      return exitCodes.precondition;
    case Code.Unauthenticated:
    case Code.PermissionDenied:
      return exitCodes.denied;
    default:
      return exitCodes.error;
  }
}

/** One line for people: no stack trace. */
export function errorLine(err: unknown, addr: string): string {
  const e = WardenError.from(err);
  if (e.code === Code.Unavailable && /No connection established|ECONNREFUSED|connect/i.test(e.rawMessage)) {
    return `warden: cannot reach Warden at ${addr} (is it running? set --addr or WARDEN_ADDR)`;
  }
  return `warden: ${e.message}`;
}
