import { isPlanted } from "@warden/common";
import { BackendState, type InventoryEntry } from "@warden/proto";
import type { InventoryDeltaReport } from "./inventory-delta.js";

/**
 * Left on a node by a full reconcile that found it settled (see
 * {@link settledMark}): what its next unchanged heartbeat must find again to
 * skip the reconcile. Undefined when the node has something pending.
 */
export interface SettledMark {
  /** The loader's held-instance stamp for the node then (Loader.heldStamp). */
  readonly heldStamp: number;
}

/** The node's state right after a full reconcile of one heartbeat. */
export interface AfterReconcile {
  /** The inventory just stored (fenced and gone entries already dropped). */
  readonly inventory: readonly InventoryEntry[];
  /** Entries the agent reported, before that filter. */
  readonly reportedCount: number;
  /** Orphans the heartbeat reported. */
  readonly orphanCount: number;
  /** Open fences and pending missing counts of the node after it. */
  readonly fenceCount: number;
  readonly missingCount: number;
  /** The instances the loader holds on the node after it, and their stamp. */
  readonly held: readonly { readonly incarnation: string }[];
  readonly heldStamp: number;
  /** The leftovers the loader holds on the node after it. */
  readonly leftoverCount: number;
}

/**
 * Whether the node is settled after a full reconcile, and what proves it
 * later. Settled: nothing fenced or filtered, no pending missing count, no
 * orphan, no leftover, and the inventory lists exactly the instances the
 * loader holds there, none exited. Reconciling that same inventory again
 * changes nothing while the held set, the fences and the leftovers stay as
 * they are: every entry is known (nothing adopted, nothing starting
 * elsewhere), every held instance is listed (no missing count starts), and
 * the occupancy it would push is the one pushed already. O(entries).
 */
export function settledMark(a: AfterReconcile): SettledMark | undefined {
  if (a.fenceCount !== 0 || a.orphanCount !== 0 || a.leftoverCount !== 0) return undefined;
  if (a.inventory.length !== a.reportedCount) return undefined;
  // Planted bug "unchanged-ignores-missing": held instances the inventory lacks, and their pending counts, are not looked at.
  const complete = isPlanted("unchanged-ignores-missing") || (a.missingCount === 0 && a.held.length === a.inventory.length);
  if (!complete) return undefined;
  const held = new Set(a.held.map((h) => h.incarnation));
  for (const e of a.inventory) if (e.state === BackendState.EXITED || !held.has(e.incarnation)) return undefined;
  return { heldStamp: a.heldStamp };
}

/** What an applied heartbeat finds, for {@link unchangedHeartbeat}. */
export interface UnchangedInput {
  /** The delta applied; undefined for a full inventory. */
  readonly delta: InventoryDeltaReport | undefined;
  readonly orphanCount: number;
  /** The node's mark from its last full reconcile. */
  readonly mark: SettledMark | undefined;
  /** The node was ready with an inventory before this heartbeat (not back from unreachable or lost, not its first). */
  readonly wasReady: boolean;
  /** Now: the node's open fences, the loader's held stamp and leftovers there. */
  readonly fenceCount: number;
  readonly heldStamp: number;
  readonly leftoverCount: number;
}

/**
 * True when this heartbeat may skip the inventory reconcile: an empty delta
 * (the inventory is the one last reconciled) on a node the last full
 * reconcile left settled, with nothing for it since — no fence (a confirmed
 * stop, or an incarnation the loader learnt is gone: every such confirmation
 * fences it), no change to the instances the loader holds there, no leftover,
 * no orphan now. O(1). The time-driven rules the reconcile serves have
 * nothing due then: missing counts are all zero, no fence waits for release,
 * no orphan's grace runs; open stop intents the loader no longer tracks are
 * still counted on this path (NodeTable).
 */
export function unchangedHeartbeat(i: UnchangedInput): boolean {
  if (i.delta === undefined || i.delta.upserts.length !== 0 || i.delta.removed.length !== 0) return false;
  if (i.mark === undefined || !i.wasReady) return false;
  return i.orphanCount === 0 && i.fenceCount === 0 && i.leftoverCount === 0 && i.heldStamp === i.mark.heldStamp;
}
