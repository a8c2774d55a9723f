/**
 * Where a heartbeat stands against the last one seen from its node, ordered
 * by (boot epoch, sequence):
 * - `unknown`: no such node, it must register;
 * - `register-again`: another boot epoch. Newer: the agent restarted. Older:
 *   a delayed report of an earlier boot, or a restart after the agent's wall
 *   clock stepped back (the epoch is wall time) — the agent registers again
 *   with its current epoch, a no-op in the first case and the only way back
 *   in the second (a "stale" answer would ignore that agent forever);
 * - `stale`: an older sequence, or the same sequence once an inventory is
 *   held — ignored (the agent is still told it is known);
 * - `apply`: newer, or the first inventory at the registered sequence.
 */
export type HeartbeatOrder = "unknown" | "register-again" | "stale" | "apply";

export function heartbeatOrder(
  last: { readonly bootEpoch: bigint; readonly sequence: bigint; readonly hasInventory: boolean } | undefined,
  hb: { readonly bootEpoch: bigint; readonly sequence: bigint },
): HeartbeatOrder {
  if (last === undefined) return "unknown";
  if (hb.bootEpoch !== last.bootEpoch) return "register-again";
  if (hb.sequence < last.sequence || (hb.sequence === last.sequence && last.hasInventory)) return "stale";
  return "apply";
}

/**
 * Bound on how far one heartbeat's sequence may run ahead of the last one
 * applied from its node: `sequenceSlack` plus `sequencePerSecond` for every
 * second since then (an honest agent spends one sequence per call, at most
 * about five a second while it retries; it heartbeats once a second). A jump
 * beyond it (2^62, say) would make every real heartbeat after it "stale", so it
 * is refused, never applied. The first heartbeat of a fresh registration sets
 * the baseline, bounded only by `maxSequence`.
 */
export const sequenceBounds = Object.freeze({
  sequenceSlack: 1024n,
  sequencePerSecond: 100n,
  /** 2^53 − 1: any sequence beyond cannot come from an agent counting one per call. */
  maxSequence: BigInt(Number.MAX_SAFE_INTEGER),
});

/** Why a heartbeat's sequence is out of bounds, or undefined when it is within them. */
export function sequenceOutOfBounds(last: { readonly sequence: bigint; readonly hasInventory: boolean } | undefined, sequence: bigint, elapsedMs: number): string | undefined {
  const b = sequenceBounds;
  if (sequence > b.maxSequence) return `${sequence.toString()} is above ${b.maxSequence.toString()}`;
  if (last === undefined || !last.hasInventory || sequence <= last.sequence) return undefined;
  const allowed = b.sequenceSlack + (BigInt(Math.max(0, Math.floor(elapsedMs))) * b.sequencePerSecond) / 1000n;
  const step = sequence - last.sequence;
  return step > allowed ? `jumps ${step.toString()} past the last one applied (${last.sequence.toString()}); at most ${allowed.toString()} now (${b.sequenceSlack.toString()} + ${b.sequencePerSecond.toString()}/s since it)` : undefined;
}
