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
