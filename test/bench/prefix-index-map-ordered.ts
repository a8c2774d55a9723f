/** Bench-only copy of PrefixIndex before its recency orders became linked lists: the oldest entry found as a Map's first (prefix-index.bench.ts baseline). */
/** Bounds of a {@link PrefixIndex}; every one is enforced on each record. */
interface PrefixIndexBounds {
  /** Entries (replica × block hash) across all replicas. */
  readonly maxEntries: number;
  /** Entries of one replica: about what one backend's prefix cache holds. */
  readonly maxEntriesPerReplica: number;
  /** An entry not sent again for this long no longer counts (the backend has likely evicted it). */
  readonly ttlMs: number;
}

interface Entry {
  readonly key: string;
  readonly replica: string;
  readonly hash: number;
  atMs: number;
}

/**
 * Which prompt blocks each replica was recently sent: the router's guess of
 * each backend's prefix cache. Bounded: at most `maxEntries` in all and
 * `maxEntriesPerReplica` per replica (least recently sent first out), and
 * entries older than `ttlMs` are dropped. Time comes in as `nowMs` from the
 * caller's monotonic clock (no clock here); it must not go backwards.
 * Work per call is proportional to the blocks of the call (plus expired
 * entries removed), never to the size of the index.
 */
export class MapOrderedPrefixIndex {
  /** Every entry, least recently sent first (a Map keeps insertion order; a touch re-inserts). */
  private readonly all = new Map<string, Entry>();
  private readonly byReplica = new Map<string, Map<number, Entry>>();

  constructor(private readonly bounds: PrefixIndexBounds) {}

  get size(): number {
    return this.all.size;
  }

  /** Entries held for `replica`. */
  sizeOf(replica: string): number {
    return this.byReplica.get(replica)?.size ?? 0;
  }

  get replicas(): number {
    return this.byReplica.size;
  }

  /**
   * `replica` was sent a prompt with these chained block hashes. Recorded
   * last block first, so a prompt's leading blocks — the ones other prompts
   * share — are the most recently used and the last to be evicted.
   */
  record(replica: string, hashes: readonly number[], nowMs: number): void {
    this.expire(nowMs);
    let mine = this.byReplica.get(replica);
    if (mine === undefined) {
      mine = new Map();
      this.byReplica.set(replica, mine);
    }
    for (let i = hashes.length - 1; i >= 0; i--) {
      const hash = hashes[i] as number;
      const had = mine.get(hash);
      if (had !== undefined) {
        had.atMs = nowMs;
        mine.delete(hash);
        mine.set(hash, had);
        this.all.delete(had.key);
        this.all.set(had.key, had);
        continue;
      }
      const e: Entry = { key: `${replica}\n${String(hash)}`, replica, hash, atMs: nowMs };
      mine.set(hash, e);
      this.all.set(e.key, e);
      if (mine.size > this.bounds.maxEntriesPerReplica) this.remove(mine.values().next().value as Entry, replica);
      if (this.all.size > this.bounds.maxEntries) this.remove(this.all.values().next().value as Entry, replica);
    }
    if (mine.size === 0) this.byReplica.delete(replica);
  }

  /** How many leading blocks of `hashes` `replica` was sent within the TTL. */
  matchLength(replica: string, hashes: readonly number[], nowMs: number): number {
    const mine = this.byReplica.get(replica);
    if (mine === undefined) return 0;
    let n = 0;
    for (const hash of hashes) {
      const e = mine.get(hash);
      if (e === undefined || nowMs - e.atMs >= this.bounds.ttlMs) break;
      n++;
    }
    return n;
  }

  /** Forgets a replica (it stopped): O(its entries). */
  drop(replica: string): void {
    const mine = this.byReplica.get(replica);
    if (mine === undefined) return;
    for (const e of mine.values()) this.all.delete(e.key);
    this.byReplica.delete(replica);
  }

  /** Drops entries past the TTL: they sit at the front, so this stops at the first live one. */
  expire(nowMs: number): void {
    for (const e of this.all.values()) {
      if (nowMs - e.atMs < this.bounds.ttlMs) return;
      this.remove(e);
    }
  }

  /** Removes one entry; an emptied replica is forgotten unless it is `keep` (the one being recorded, whose map is in use). */
  private remove(e: Entry, keep?: string): void {
    this.all.delete(e.key);
    const mine = this.byReplica.get(e.replica);
    if (mine === undefined) return;
    mine.delete(e.hash);
    if (mine.size === 0 && e.replica !== keep) this.byReplica.delete(e.replica);
  }
}
