import { digestWith, emptyInventoryDigest, inventoryEntryHash, type InventoryEntry } from "@warden/proto";

/** What one heartbeat says about the inventory: the whole of it, or a delta against an acknowledged one. */
export type InventoryPart =
  | { readonly t: "full"; readonly backends: InventoryEntry[] }
  | { readonly t: "delta"; readonly delta: { readonly baseSequence: bigint; readonly upserts: InventoryEntry[]; readonly removed: string[]; readonly digest: bigint } };

export interface InventoryDeltaWriterOptions {
  /** A full inventory at least this often, whatever the coordinator acknowledged (the safety net). @default 60 000 */
  readonly fullEveryMs?: number;
}

interface Sent {
  readonly entry: InventoryEntry;
  readonly hash: bigint;
  /** The entry's hash with memory left out: what makes a change apart from memory. */
  readonly shape: bigint;
}

interface View {
  readonly sequence: bigint;
  readonly entries: Map<string, Sent>;
  readonly digest: bigint;
}

/** A memory reading moves an entry only past 1/16 of the last one sent or 16 MiB, whichever is larger. */
const memoryStepMinBytes = 16n * 1024n * 1024n;

function memoryMoved(before: bigint, now: bigint): boolean {
  const step = before / 16n > memoryStepMinBytes ? before / 16n : memoryStepMinBytes;
  const d = now > before ? now - before : before - now;
  return d > step;
}

/**
 * The agent's half of delta heartbeats. It remembers the inventory the
 * coordinator last acknowledged (an `ok` answer to that very heartbeat) and
 * sends only what changed against it, with the digest of the whole result;
 * a full inventory when it holds no acknowledged one (first heartbeat, after
 * a registration or the coordinator's full_inventory_required) and at least
 * every `fullEveryMs`. A memory reading alone changes an entry only when it
 * moved past a step (memoryMoved), so a steady node sends empty deltas; the
 * periodic full inventory carries exact readings. Pure: the caller passes time.
 */
export class InventoryDeltaWriter {
  private acked: View | undefined;
  private sent: View | undefined;
  private lastFullAtMs: number | undefined;
  private readonly fullEveryMs: number;

  constructor(o: InventoryDeltaWriterOptions = {}) {
    this.fullEveryMs = o.fullEveryMs ?? 60_000;
  }

  /** The inventory part of the heartbeat numbered `sequence`, from the entries read for it. */
  build(sequence: bigint, entries: readonly InventoryEntry[], nowMs: number): InventoryPart {
    const base = this.acked;
    const full = base === undefined || this.lastFullAtMs === undefined || nowMs - this.lastFullAtMs >= this.fullEveryMs;
    const view = new Map<string, Sent>();
    const upserts: InventoryEntry[] = [];
    let digest = emptyInventoryDigest;
    for (const e of entries) {
      const before = full ? undefined : base.entries.get(e.incarnation);
      const shape = inventoryEntryHash({ ...e, memoryBytes: 0n });
      const kept = before !== undefined && before.shape === shape && !memoryMoved(before.entry.memoryBytes, e.memoryBytes);
      const s = kept ? before : { entry: e, hash: inventoryEntryHash(e), shape };
      if (!kept) upserts.push(e);
      view.set(e.incarnation, s);
      digest = digestWith(digest, s.hash, 1);
    }
    this.sent = { sequence, entries: view, digest };
    if (full) {
      this.lastFullAtMs = nowMs;
      return { t: "full", backends: [...entries] };
    }
    const removed: string[] = [];
    for (const inc of base.entries.keys()) if (!view.has(inc)) removed.push(inc);
    return { t: "delta", delta: { baseSequence: base.sequence, upserts, removed, digest } };
  }

  /** The coordinator answered `ok` to the heartbeat numbered `sequence`: its inventory is the base from now on. */
  acknowledged(sequence: bigint): void {
    if (this.sent?.sequence === sequence) this.acked = this.sent;
  }

  /** The coordinator holds no base of ours (register again, or full_inventory_required): the next heartbeat is full. */
  reset(): void {
    this.acked = undefined;
    this.sent = undefined;
  }
}
