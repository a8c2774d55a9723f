/** What the heap orders: a due time, then a sequence number; it keeps `heapIndex` (-1 when out). */
export interface HeapEntry {
  /** Meaningful only while in the heap. */
  dueAtMs: number;
  /** Breaks ties between equal due times. */
  seq: number;
  /** Position in the heap, -1 when not in it. */
  heapIndex: number;
}

/** One address's place in the tick schedule. */
export interface DueEntry extends HeapEntry {
  readonly address: string;
  /** The address's request-state creation order (`RequestTracker.seqOf`): decisions follow it. */
  seq: number;
  /** The model whose replica floor held this address's idle eviction back (parked until it gains a ready instance). */
  floorModel: string | undefined;
}

/**
 * A binary min-heap of entries on (due time, seq), indexed: each entry knows
 * its position, so moving or removing one is O(log n) and no stale copies
 * pile up.
 */
export class DueHeap<E extends HeapEntry = DueEntry> {
  private readonly items: E[] = [];

  get size(): number {
    return this.items.length;
  }

  /** The earliest entry, or undefined when empty. */
  peek(): E | undefined {
    return this.items[0];
  }

  /** Inserts `e` at `dueAtMs`, or moves it there when it is already in the heap. */
  set(e: E, dueAtMs: number): void {
    e.dueAtMs = dueAtMs;
    if (e.heapIndex < 0) {
      e.heapIndex = this.items.length;
      this.items.push(e);
    }
    this.up(e.heapIndex);
    this.down(e.heapIndex);
  }

  /** Removes `e` when it is in the heap. */
  delete(e: E): void {
    const i = e.heapIndex;
    if (i < 0) return;
    e.heapIndex = -1;
    const last = this.items.pop();
    if (last === undefined || last === e) return;
    this.items[i] = last;
    last.heapIndex = i;
    this.up(i);
    this.down(i);
  }

  /** Removes and returns the earliest entry. */
  pop(): E | undefined {
    const top = this.items[0];
    if (top !== undefined) this.delete(top);
    return top;
  }

  private less(a: E, b: E): boolean {
    return a.dueAtMs < b.dueAtMs || (a.dueAtMs === b.dueAtMs && a.seq < b.seq);
  }

  private swap(i: number, j: number): void {
    const a = this.items[i];
    const b = this.items[j];
    if (a === undefined || b === undefined) return;
    this.items[i] = b;
    this.items[j] = a;
    a.heapIndex = j;
    b.heapIndex = i;
  }

  private up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const a = this.items[i];
      const p = this.items[parent];
      if (a === undefined || p === undefined || !this.less(a, p)) return;
      this.swap(i, parent);
      i = parent;
    }
  }

  private down(i: number): void {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let best = i;
      const b0 = this.items[best];
      const li = this.items[l];
      const ri = this.items[r];
      if (b0 === undefined) return;
      if (li !== undefined && this.less(li, b0)) best = l;
      const bb = this.items[best];
      if (ri !== undefined && bb !== undefined && this.less(ri, bb)) best = r;
      if (best === i) return;
      this.swap(i, best);
      i = best;
    }
  }
}
