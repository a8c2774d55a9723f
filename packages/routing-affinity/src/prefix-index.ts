/** Bounds of a {@link PrefixIndex}; every one is enforced on each record. */
export interface PrefixIndexBounds {
  /** Entries (replica × block hash) across all replicas. */
  readonly maxEntries: number;
  /** Entries of one replica: about what one backend's prefix cache holds. */
  readonly maxEntriesPerReplica: number;
  /** An entry not sent again for this long no longer counts (the backend has likely evicted it). */
  readonly ttlMs: number;
}

interface Entry {
  readonly replica: string;
  readonly hash: number;
  atMs: number;
  /** Neighbours in the index's order and in the replica's (least recently sent first). */
  prevAll: Entry | undefined;
  nextAll: Entry | undefined;
  prevOwn: Entry | undefined;
  nextOwn: Entry | undefined;
}

/** One replica's entries: by hash, and in order (least recently sent first). */
interface ReplicaEntries {
  readonly byHash: Map<number, Entry>;
  head: Entry | undefined;
  tail: Entry | undefined;
}

/**
 * Which prompt blocks each replica was recently sent: the router's guess of
 * each backend's prefix cache. Bounded: at most `maxEntries` in all and
 * `maxEntriesPerReplica` per replica (least recently sent first out), and
 * entries older than `ttlMs` are dropped. Time comes in as `nowMs` from the
 * caller's monotonic clock (no clock here); it must not go backwards.
 * Work per call is proportional to the blocks of the call (plus expired
 * entries removed), never to the size of the index: the recency orders are
 * linked lists, so the oldest entry is found in O(1) (a Map's first entry is
 * not: iterating from its front walks the slots of entries deleted since its
 * last rehash, which made every eviction O(index) once a replica was full).
 */
export class PrefixIndex {
  private readonly byReplica = new Map<string, ReplicaEntries>();
  private head: Entry | undefined;
  private tail: Entry | undefined;
  private count = 0;

  constructor(private readonly bounds: PrefixIndexBounds) {}

  get size(): number {
    return this.count;
  }

  /** Entries held for `replica`. */
  sizeOf(replica: string): number {
    return this.byReplica.get(replica)?.byHash.size ?? 0;
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
      mine = { byHash: new Map(), head: undefined, tail: undefined };
      this.byReplica.set(replica, mine);
    }
    for (let i = hashes.length - 1; i >= 0; i--) {
      const hash = hashes[i] as number;
      const had = mine.byHash.get(hash);
      if (had !== undefined) {
        had.atMs = nowMs;
        this.unlink(had, mine);
        this.append(had, mine);
        continue;
      }
      const e: Entry = { replica, hash, atMs: nowMs, prevAll: undefined, nextAll: undefined, prevOwn: undefined, nextOwn: undefined };
      mine.byHash.set(hash, e);
      this.append(e, mine);
      this.count++;
      if (mine.byHash.size > this.bounds.maxEntriesPerReplica && mine.head !== undefined) this.remove(mine.head, replica);
      if (this.count > this.bounds.maxEntries && this.head !== undefined) this.remove(this.head, replica);
    }
    if (mine.byHash.size === 0) this.byReplica.delete(replica);
  }

  /** How many leading blocks of `hashes` `replica` was sent within the TTL. */
  matchLength(replica: string, hashes: readonly number[], nowMs: number): number {
    const mine = this.byReplica.get(replica);
    if (mine === undefined) return 0;
    let n = 0;
    for (const hash of hashes) {
      const e = mine.byHash.get(hash);
      if (e === undefined || nowMs - e.atMs >= this.bounds.ttlMs) break;
      n++;
    }
    return n;
  }

  /** Forgets a replica (it stopped): O(its entries). */
  drop(replica: string): void {
    const mine = this.byReplica.get(replica);
    if (mine === undefined) return;
    for (let e = mine.head; e !== undefined; e = e.nextOwn) this.unlinkAll(e);
    this.count -= mine.byHash.size;
    this.byReplica.delete(replica);
  }

  /** Drops entries past the TTL: they sit at the front, so this stops at the first live one. */
  expire(nowMs: number): void {
    while (this.head !== undefined && nowMs - this.head.atMs >= this.bounds.ttlMs) this.remove(this.head);
  }

  /** Removes one entry; an emptied replica is forgotten unless it is `keep` (the one being recorded, whose map is in use). */
  private remove(e: Entry, keep?: string): void {
    const mine = this.byReplica.get(e.replica);
    if (mine === undefined) return;
    this.unlink(e, mine);
    mine.byHash.delete(e.hash);
    this.count--;
    if (mine.byHash.size === 0 && e.replica !== keep) this.byReplica.delete(e.replica);
  }

  /** Puts `e` last (most recently sent) in both orders. */
  private append(e: Entry, mine: ReplicaEntries): void {
    e.prevAll = this.tail;
    e.nextAll = undefined;
    if (this.tail === undefined) this.head = e;
    else this.tail.nextAll = e;
    this.tail = e;
    e.prevOwn = mine.tail;
    e.nextOwn = undefined;
    if (mine.tail === undefined) mine.head = e;
    else mine.tail.nextOwn = e;
    mine.tail = e;
  }

  /** Takes `e` out of both orders. */
  private unlink(e: Entry, mine: ReplicaEntries): void {
    this.unlinkAll(e);
    if (e.prevOwn === undefined) mine.head = e.nextOwn;
    else e.prevOwn.nextOwn = e.nextOwn;
    if (e.nextOwn === undefined) mine.tail = e.prevOwn;
    else e.nextOwn.prevOwn = e.prevOwn;
    e.prevOwn = undefined;
    e.nextOwn = undefined;
  }

  private unlinkAll(e: Entry): void {
    if (e.prevAll === undefined) this.head = e.nextAll;
    else e.prevAll.nextAll = e.nextAll;
    if (e.nextAll === undefined) this.tail = e.prevAll;
    else e.nextAll.prevAll = e.prevAll;
    e.prevAll = undefined;
    e.nextAll = undefined;
  }
}
