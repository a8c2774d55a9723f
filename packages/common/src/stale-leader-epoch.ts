import { Code, WardenError } from "./errors.js";

/** The `details.reason` that marks a stale-leader-epoch refusal; it crosses gRPC in the details trailer. */
export const staleLeaderEpochReason = "stale-leader-epoch";

/**
 * An agent refused a command because its `leader_epoch` is older than the
 * newest the agent has seen (HA fencing): a newer coordinator leads.
 * FAILED_PRECONDITION, and the agent changed nothing. Not transient — a retry
 * from the same epoch is refused again; the HA layer steps down on it, and
 * the stop sequence treats the instance as not stopped by us (it stays
 * registered). A subclass because callers branch on it.
 */
export class StaleLeaderEpochError extends WardenError {
  override readonly name: string = "StaleLeaderEpochError";
  /** The refused command's epoch. */
  readonly leaderEpoch: bigint;
  /** The newest epoch the agent has seen. */
  readonly newestSeen: bigint;

  /** By details, not prototype: WardenError's own check is a brand, which every WardenError carries. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return value instanceof WardenError && value.code === Code.FailedPrecondition && value.details["reason"] === staleLeaderEpochReason;
  }

  constructor(leaderEpoch: bigint, newestSeen: bigint, options: { cause?: unknown } = {}) {
    super(Code.FailedPrecondition, `leader_epoch: ${String(leaderEpoch)} is older than the newest leader epoch this agent has seen (${String(newestSeen)}): a newer coordinator leads; nothing was changed`, {
      ...options,
      details: { field: "leader_epoch", reason: staleLeaderEpochReason, leaderEpoch: String(leaderEpoch), newestSeen: String(newestSeen) },
    });
    this.leaderEpoch = leaderEpoch;
    this.newestSeen = newestSeen;
  }

  /**
   * The typed error for a refusal that arrived as a plain WardenError (over
   * gRPC, the details trailer carries the marker); anything else unchanged.
   */
  static fromWire(err: unknown): unknown {
    if (!(err instanceof WardenError) || err.details["reason"] !== staleLeaderEpochReason || err.code !== Code.FailedPrecondition) return err;
    if (Object.getPrototypeOf(err) === StaleLeaderEpochError.prototype) return err;
    return new StaleLeaderEpochError(bigintOf(err.details["leaderEpoch"]), bigintOf(err.details["newestSeen"]), { cause: err });
  }
}

/** True for a stale-leader-epoch refusal, typed or as it came over the wire. */
export function isStaleLeaderEpoch(err: unknown): boolean {
  return err instanceof StaleLeaderEpochError;
}

function bigintOf(v: unknown): bigint {
  return typeof v === "string" && /^[0-9]{1,20}$/.test(v) ? BigInt(v) : 0n;
}
