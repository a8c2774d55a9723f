import { Code, WardenError, isPlanted } from "@warden/common";

/** Ends a request. Idempotent: the second and later calls do nothing (LocalAI's run-once guard). */
export type Completion = () => void;

/**
 * One open request. Open requests of an address form a doubly linked list in
 * start order: ids and the monotonic clock only increase, so appending keeps
 * the list sorted and its head is the oldest live request. That makes
 * busy-since (LocalAI: the minimum start among the remaining requests) an O(1)
 * read instead of a rescan, and begin/end O(1) whatever the number open.
 */
interface OpenRequest {
  readonly id: number;
  readonly startMs: number;
  readonly owner: AddressRequests;
  prev: OpenRequest | undefined;
  next: OpenRequest | undefined;
  done: boolean;
}

/** Request state of one address (LocalAI's six maps, per address). */
class AddressRequests {
  /** False once the state was cleared (settle rows 2/4, removal): completions for it become no-ops. */
  live = true;
  /** Queued in the tracker's changed list since the tick schedule last took it. */
  changed = false;
  head: OpenRequest | undefined;
  tail: OpenRequest | undefined;
  count = 0;
  /** Legacy `mark` ids, LIFO; `unmark` pops. */
  legacy: OpenRequest[] = [];
  idleSinceMs: number | undefined;
  lastUsedMs: number | undefined;

  constructor(
    readonly address: string,
    /** Creation order: the order of `addresses()`, which the tick's decisions follow. */
    readonly seq: number,
  ) {}
}

/** A read-only view of one address's request state. */
export interface AddressRequestView {
  readonly address: string;
  readonly inFlight: number;
  /** Start of the oldest live request; undefined when nothing is in flight. */
  readonly busySinceMs: number | undefined;
  /** When the last in-flight request finished; present only while nothing is in flight. */
  readonly idleSinceMs: number | undefined;
  /** Last begin, end or `updateLastUsed`. */
  readonly lastUsedMs: number | undefined;
  /** Open request ids, oldest first. */
  readonly openRequestIds: readonly number[];
}

/**
 * Request state keyed by address (DESIGN §3.1; localai-semantics §2), kept
 * apart from identity. It does not know which addresses are registered: the
 * core decides when state is cleared.
 */
export class RequestTracker {
  private readonly byAddress = new Map<string, AddressRequests>();
  private nextRequestId = 1;
  private nextSeq = 0;
  /**
   * Addresses whose busy-since or idle-since may have changed (or that were
   * created or cleared) since `takeChanged`: the tick schedule re-times only
   * these. One flag check per begin/end that changes them, no allocation.
   */
  private changedList: AddressRequests[] = [];
  /**
   * Addresses whose in-flight count is not 0 (normally the busy ones): `idle`
   * answers from this small set instead of the map of every address, whose
   * probe costs cache misses once the cluster holds ~100 000 addresses.
   * Kept by `counted` after every change of a live state's count, and by `clear`.
   */
  private readonly nonZero = new Set<string>();

  constructor(
    private readonly nowMs: () => number,
    private readonly maxAddresses: number,
    private readonly maxOpenPerAddress: number,
  ) {}

  private stateFor(address: string): AddressRequests {
    let s = this.byAddress.get(address);
    if (s === undefined) {
      if (this.byAddress.size >= this.maxAddresses) {
        throw new WardenError(Code.ResourceExhausted, `request tracking: at most ${this.maxAddresses} addresses`, { details: { address } });
      }
      s = new AddressRequests(address, this.nextSeq++);
      this.byAddress.set(address, s);
      this.noteChange(s);
    }
    return s;
  }

  /** Keeps `nonZero` in step with a live state's count; called after every change of it. */
  private counted(s: AddressRequests): void {
    if (s.count !== 0) this.nonZero.add(s.address);
    else this.nonZero.delete(s.address);
  }

  private noteChange(s: AddressRequests): void {
    if (s.changed) return;
    s.changed = true;
    this.changedList.push(s);
  }

  /**
   * The addresses noted as changed since the last call (each at most once;
   * one may since have been cleared, or cleared and created again).
   */
  takeChanged(): string[] {
    const list = this.changedList;
    if (list.length === 0) return [];
    this.changedList = [];
    const out: string[] = [];
    for (const s of list) {
      s.changed = false;
      out.push(s.address);
    }
    return out;
  }

  /** Creation order of the address's state (the order of `addresses()`); undefined when it has none. */
  seqOf(address: string): number | undefined {
    return this.byAddress.get(address)?.seq;
  }

  private begin(address: string): OpenRequest {
    const s = this.stateFor(address);
    if (s.count >= this.maxOpenPerAddress) {
      throw new WardenError(Code.ResourceExhausted, `request tracking: at most ${this.maxOpenPerAddress} open requests on ${address}`, {
        details: { address },
      });
    }
    const now = this.nowMs();
    // The first open request sets busy-since and ends idle-since; later ones change neither.
    if (s.head === undefined) this.noteChange(s);
    const r: OpenRequest = { id: this.nextRequestId++, startMs: now, owner: s, prev: s.tail, next: undefined, done: false };
    if (s.tail === undefined) s.head = r;
    else s.tail.next = r;
    s.tail = r;
    s.count++;
    // Only a count that leaves or reaches 0 changes `nonZero` (a planted bug can take it below 0).
    if (s.count === 1 || s.count === 0) this.counted(s);
    s.lastUsedMs = now;
    s.idleSinceMs = undefined;
    return r;
  }

  private end(r: OpenRequest): void {
    if (r.done) {
      // Planted bug "inflight-below-zero": the run-once guard forgets to stop the second decrement.
      if (isPlanted("inflight-below-zero") && r.owner.live) {
        r.owner.count--;
        this.counted(r.owner);
        this.noteChange(r.owner);
      }
      return;
    }
    r.done = true;
    const s = r.owner;
    // Cleared meanwhile (settled or dropped): the id is gone, so this is a no-op (invariant I4).
    if (!s.live) return;
    // Ending the oldest open request moves busy-since; ending the last one starts idle-since.
    if (r.prev === undefined) {
      this.noteChange(s);
      s.head = r.next;
    } else r.prev.next = r.next;
    if (r.next === undefined) s.tail = r.prev;
    else r.next.prev = r.prev;
    r.prev = undefined;
    r.next = undefined;
    s.count--;
    if (s.count === 0 || s.count === -1) this.counted(s);
    const now = this.nowMs();
    s.lastUsedMs = now;
    if (s.count === 0) {
      s.idleSinceMs = now;
      this.noteChange(s);
    }
  }

  /** Begins a request on `address` and returns its idempotent completion. O(1). */
  track(address: string): Completion {
    const r = this.begin(address);
    return () => {
      this.end(r);
    };
  }

  /** Legacy begin: pushes the id on the address's LIFO stack. */
  mark(address: string): number {
    const r = this.begin(address);
    r.owner.legacy.push(r);
    return r.id;
  }

  /** Legacy end: finishes the most recent legacy request; nothing when none is open. Never ends a `track` request. */
  unmark(address: string): void {
    const s = this.byAddress.get(address);
    if (s === undefined) return;
    const r = s.legacy.pop();
    if (r !== undefined) this.end(r);
  }

  /** Sets last-used to now (LocalAI `UpdateLastUsed`, on a cache hit). */
  touch(address: string): void {
    this.stateFor(address).lastUsedMs = this.nowMs();
  }

  /** Seeds last-used and idle-since for an address with no state yet (an instance that became ready). */
  seedIdle(address: string): void {
    if (this.byAddress.has(address)) return;
    const s = this.stateFor(address);
    const now = this.nowMs();
    s.lastUsedMs = now;
    s.idleSinceMs = now;
    this.noteChange(s);
  }

  inFlight(address: string): number {
    return this.byAddress.get(address)?.count ?? 0;
  }

  /** `inFlight(address) === 0`, read from the small set of addresses with requests open (placement's per-instance check). */
  idle(address: string): boolean {
    return this.nonZero.size === 0 || !this.nonZero.has(address);
  }

  busySinceMs(address: string): number | undefined {
    return this.byAddress.get(address)?.head?.startMs;
  }

  idleSinceMs(address: string): number | undefined {
    return this.byAddress.get(address)?.idleSinceMs;
  }

  lastUsedMs(address: string): number | undefined {
    return this.byAddress.get(address)?.lastUsedMs;
  }

  has(address: string): boolean {
    return this.byAddress.has(address);
  }

  /**
   * Addresses with calls in flight, with their counts: O(busy addresses), from
   * `nonZero`. A reader summing calls over many instances (a scrape's per-node
   * gauge) looks up this small map instead of the big one.
   */
  busyAddresses(): Map<string, number> {
    const out = new Map<string, number>();
    for (const address of this.nonZero) out.set(address, this.byAddress.get(address)?.count ?? 0);
    return out;
  }

  /** Open request ids of `address`, oldest first. O(open). */
  openIds(address: string): number[] {
    const ids: number[] = [];
    for (let r = this.byAddress.get(address)?.head; r !== undefined; r = r.next) ids.push(r.id);
    return ids;
  }

  /**
   * Clears the address's request state and returns the ids that were still
   * open. Their completions become no-ops. O(1) plus the id list.
   */
  clear(address: string): number[] {
    const s = this.byAddress.get(address);
    if (s === undefined) return [];
    const ids = this.openIds(address);
    s.live = false;
    this.byAddress.delete(address);
    this.nonZero.delete(address);
    this.noteChange(s);
    return ids;
  }

  /**
   * Planted bug "restore-request-snapshot" only (LocalAI's restore after a
   * failed stop): re-opens the ids of a snapshot that are no longer open, as
   * the oldest requests. Their completions already ran, so they never end.
   */
  restoreSnapshot(address: string, ids: readonly number[], startMs: number): void {
    const open = new Set(this.openIds(address));
    for (const id of ids) {
      if (open.has(id)) continue;
      const s = this.stateFor(address);
      const r: OpenRequest = { id, startMs, owner: s, prev: undefined, next: s.head, done: false };
      if (s.head === undefined) s.tail = r;
      else s.head.prev = r;
      s.head = r;
      s.count++;
      this.counted(s);
      s.idleSinceMs = undefined;
      this.noteChange(s);
    }
  }

  view(address: string): AddressRequestView | undefined {
    const s = this.byAddress.get(address);
    if (s === undefined) return undefined;
    return {
      address,
      inFlight: s.count,
      busySinceMs: s.head?.startMs,
      idleSinceMs: s.idleSinceMs,
      lastUsedMs: s.lastUsedMs,
      openRequestIds: this.openIds(address),
    };
  }

  /** Every address with request state, in insertion order. */
  addresses(): IterableIterator<string> {
    return this.byAddress.keys();
  }

  get size(): number {
    return this.byAddress.size;
  }
}
