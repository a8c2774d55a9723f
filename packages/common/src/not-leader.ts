import { Code, WardenError } from "./errors.js";

/** The `details.reason` of a standby's refusal; it crosses gRPC in the details trailer. */
export const notLeaderReason = "not-leader";

/** Longest leader address a client accepts from a hint (a DNS name is at most 253 characters). */
const maxLeaderAddressChars = 300;

/**
 * What a coordinator that does not lead answers every call but GetHaStatus
 *: UNAVAILABLE — retryable, the caller should go to the leader —
 * with the leader's advertised address in `details.leaderAddress` when it
 * knows one, so agents, the CLI and inference clients follow without a scan.
 */
export function notLeaderError(leaderAddress: string | undefined, why = "this coordinator is a standby"): WardenError {
  const where = leaderAddress === undefined || leaderAddress === "" ? "no leader is known yet; try another coordinator" : `the leader is at ${leaderAddress}`;
  return new WardenError(Code.Unavailable, `not the leader (${why}): ${where}`, {
    details: { reason: notLeaderReason, ...(leaderAddress === undefined || leaderAddress === "" ? {} : { leaderAddress }) },
  });
}

/**
 * The leader address a refusal names, or undefined: not a not-leader
 * refusal, no address, or one that is not a plausible host:port (a hostile
 * peer's hint is only ever a candidate among the caller's own list).
 */
export function leaderAddressOf(err: unknown): string | undefined {
  if (!(err instanceof WardenError) || err.code !== Code.Unavailable || err.details["reason"] !== notLeaderReason) return undefined;
  const a = err.details["leaderAddress"];
  if (typeof a !== "string" || a.length === 0 || a.length > maxLeaderAddressChars || !/^[^\s/]+:\d{1,5}$/.test(a)) return undefined;
  return a;
}

/** Whether an error is a standby's refusal (with or without a leader address). */
export function isNotLeader(err: unknown): boolean {
  return err instanceof WardenError && err.code === Code.Unavailable && err.details["reason"] === notLeaderReason;
}
