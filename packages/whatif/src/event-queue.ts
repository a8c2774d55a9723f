/** One scheduled event: runs at `atMs`; ties break by insertion order (`seq`). */
interface Entry {
  readonly atMs: number;
  readonly seq: number;
  readonly label: string;
  fn: (() => void) | undefined;
}

/**
 * The simulation's virtual-time event queue: a binary min-heap on (atMs, seq),
 * so equal-time events run in the order they were scheduled. Cancelled entries
 * stay in the heap with `fn` cleared and are skipped when popped.
 */
export class EventQueue {
  private readonly heap: Entry[] = [];
  private seq = 0;
  private live = 0;

  get size(): number {
    return this.live;
  }

  /** Schedules `fn` at `atMs`; returns a cancel function (idempotent). */
  push(atMs: number, label: string, fn: () => void): () => void {
    const e: Entry = { atMs, seq: this.seq++, label, fn };
    this.heap.push(e);
    this.live++;
    this.up(this.heap.length - 1);
    return () => {
      if (e.fn !== undefined) {
        e.fn = undefined;
        this.live--;
      }
    };
  }

  /** Due time of the next live entry, or undefined. */
  peekAtMs(): number | undefined {
    this.dropCancelled();
    return this.heap[0]?.atMs;
  }

  /** Removes and returns the next live entry. */
  pop(): { readonly atMs: number; readonly label: string; readonly fn: () => void } | undefined {
    this.dropCancelled();
    const top = this.heap[0];
    if (top === undefined) return undefined;
    this.removeTop();
    const fn = top.fn;
    if (fn === undefined) return undefined;
    top.fn = undefined;
    this.live--;
    return { atMs: top.atMs, label: top.label, fn };
  }

  private dropCancelled(): void {
    while (this.heap.length > 0 && this.heap[0]?.fn === undefined) this.removeTop();
  }

  private removeTop(): void {
    const last = this.heap.pop();
    if (last === undefined || this.heap.length === 0) return;
    this.heap[0] = last;
    this.down(0);
  }

  private less(a: Entry, b: Entry): boolean {
    return a.atMs < b.atMs || (a.atMs === b.atMs && a.seq < b.seq);
  }

  private up(i: number): void {
    const h = this.heap;
    for (;;) {
      if (i === 0) return;
      const p = (i - 1) >> 1;
      const a = h[i];
      const b = h[p];
      if (a === undefined || b === undefined || !this.less(a, b)) return;
      h[i] = b;
      h[p] = a;
      i = p;
    }
  }

  private down(i: number): void {
    const h = this.heap;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      const hm = h[m];
      const hl = h[l];
      const hr = h[r];
      if (hm === undefined) return;
      let best = hm;
      if (hl !== undefined && this.less(hl, best)) {
        m = l;
        best = hl;
      }
      if (hr !== undefined && this.less(hr, best)) m = r;
      if (m === i) return;
      const t = h[m];
      if (t === undefined) return;
      h[m] = hm;
      h[i] = t;
      i = m;
    }
  }
}
