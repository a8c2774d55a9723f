import { digestWith, emptyInventoryDigest, inventoryEntryHash, type InventoryEntry } from "@warden/proto";
import { isPlanted } from "@warden/common";

/** One entry of a node's reported inventory and its share of the digest. */
export interface ReportedEntry {
  readonly entry: InventoryEntry;
  readonly hash: bigint;
}

/**
 * A node's inventory exactly as its agent last reported it (before fences or
 * the loader's gone filter), with the heartbeat that set it: the base the
 * agent's next delta is against.
 */
export interface ReportedInventory {
  /** Sequence of the heartbeat that set it (same boot epoch as the record); a delta applied onto it advances it. */
  sequence: bigint;
  readonly entries: Map<string, ReportedEntry>;
  digest: bigint;
}

/** What a delta heartbeat carries (validated by the caller against its bounds first). */
export interface InventoryDeltaReport {
  readonly baseSequence: bigint;
  readonly upserts: readonly InventoryEntry[];
  readonly removed: readonly string[];
  readonly digest: bigint;
}

/** The reported inventory a full heartbeat sets. */
export function fullReported(sequence: bigint, backends: readonly InventoryEntry[]): ReportedInventory {
  const entries = new Map<string, ReportedEntry>();
  let digest = emptyInventoryDigest;
  for (const entry of backends) {
    const hash = inventoryEntryHash(entry);
    entries.set(entry.incarnation, { entry, hash });
    digest = digestWith(digest, hash, 1);
  }
  return { sequence, entries, digest };
}

/**
 * Applies `delta` (of the heartbeat numbered `sequence`) onto `base`, in work
 * proportional to the delta: the new reported inventory, or why it cannot be
 * applied — no base, another base than the delta's, a removal of an entry the
 * base lacks, the result over `maxEntries`, or a digest that differs. A
 * refusal leaves `base` untouched (the agent is asked for a full inventory);
 * an application advances `base` itself (its map, sequence and digest) and
 * answers it.
 */
export function applyInventoryDelta(base: ReportedInventory | undefined, sequence: bigint, delta: InventoryDeltaReport, maxEntries: number): { readonly t: "applied"; readonly reported: ReportedInventory } | { readonly t: "mismatch"; readonly why: string } {
  if (base?.sequence !== delta.baseSequence) {
    const why = base === undefined ? "no inventory held" : `holds the inventory of sequence ${base.sequence.toString()}, not ${delta.baseSequence.toString()}`;
    if (!isPlanted("delta-against-wrong-base")) return { t: "mismatch", why };
    // Planted: the delta lands on an empty inventory, unchecked.
    return { t: "applied", reported: onto({ sequence, entries: new Map(), digest: emptyInventoryDigest }, sequence, delta) };
  }
  let digest = base.digest;
  let size = base.entries.size;
  for (const inc of delta.removed) {
    const old = base.entries.get(inc);
    if (old === undefined) return { t: "mismatch", why: `removes "${inc}", which its base does not list` };
    digest = digestWith(digest, old.hash, -1);
    size--;
  }
  const hashes: bigint[] = [];
  for (const e of delta.upserts) {
    const old = base.entries.get(e.incarnation);
    if (old === undefined) size++;
    else digest = digestWith(digest, old.hash, -1);
    const hash = inventoryEntryHash(e);
    hashes.push(hash);
    digest = digestWith(digest, hash, 1);
  }
  if (size > maxEntries) return { t: "mismatch", why: `would list ${String(size)} entries, over ${String(maxEntries)}` };
  if (digest !== delta.digest) return { t: "mismatch", why: "digest differs" };
  for (const inc of delta.removed) base.entries.delete(inc);
  delta.upserts.forEach((entry, i) => base.entries.set(entry.incarnation, { entry, hash: hashes[i] ?? inventoryEntryHash(entry) }));
  // Advanced in place, not copied: a copy per heartbeat, kept until the next, is promoted out of the young generation.
  base.sequence = sequence;
  base.digest = digest;
  return { t: "applied", reported: base };
}

function onto(r: ReportedInventory, sequence: bigint, delta: InventoryDeltaReport): ReportedInventory {
  for (const entry of delta.upserts) {
    const hash = inventoryEntryHash(entry);
    r.entries.set(entry.incarnation, { entry, hash });
    r.digest = digestWith(r.digest, hash, 1);
  }
  return { ...r, sequence };
}
