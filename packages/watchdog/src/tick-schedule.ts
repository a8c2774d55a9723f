import { DueHeap, type DueEntry } from "./due-heap.js";

/** How the schedule reads the request tracker and times one address. */
export interface ScheduleSource {
  /** Addresses whose request state changed since the last call (`RequestTracker.takeChanged`). */
  takeChanged(): readonly string[];
  /** Every address with request state (only after a policy change that re-times them all). */
  addresses(): Iterable<string>;
  /** The address's request-state creation order; undefined when it has none. */
  seqOf(address: string): number | undefined;
  /** When the address's busy or idle check could next fire; undefined while nothing but a change can make it fire (pending, loading, pinned, check off, neither busy nor idle). */
  dueAtMs(address: string): number | undefined;
}

/** What the last tick looked at: a count of work, not a time. */
export interface TickWork {
  /** Addresses whose timer was re-computed because something about them changed. */
  readonly retimed: number;
  /** Addresses the tick judged because their timer was due. */
  readonly visited: number;
  /** Addresses with a running timer after the tick. */
  readonly scheduled: number;
}

/**
 * Which addresses' busy or idle timers are due, so the watchdog tick judges
 * only those (work proportional to what is due, plus what changed since the
 * last tick) instead of every address.
 *
 * Each address with request state is in exactly one place: the due heap
 * (a timer runs), parked on a model's replica floor (its idle eviction waits
 * for the model to gain a ready instance), or nowhere (only a change can make
 * it fire). Every change that can move a timer marks the address dirty — the
 * request tracker's begin/end/clear, `setState` for the records at the
 * address, a pin or rule change for the model's instances, a change of the
 * timing policy for all — and the next tick re-times the dirty ones first.
 */
export class TickSchedule {
  private readonly entries = new Map<string, DueEntry>();
  private readonly heap = new DueHeap();
  private readonly dirty = new Set<string>();
  private allDirty = false;
  private readonly floorParked = new Map<string, Set<DueEntry>>();
  private work: TickWork = { retimed: 0, visited: 0, scheduled: 0 };

  markDirty(address: string): void {
    this.dirty.add(address);
  }

  /** The timing policy changed: every address is re-timed at the next tick (rare: an operator's change). */
  markAllDirty(): void {
    this.allDirty = true;
  }

  /** `model` gained a ready instance: idle evictions its floor held back may go now. */
  unparkFloor(model: string): void {
    const parked = this.floorParked.get(model);
    if (parked === undefined) return;
    this.floorParked.delete(model);
    for (const e of parked) {
      e.floorModel = undefined;
      this.dirty.add(e.address);
    }
  }

  /** Re-times every address noted since the last call. Returns how many were re-timed. */
  refresh(src: ScheduleSource): number {
    // One set, so an address both the tracker and `setState` noted is re-timed once.
    for (const a of src.takeChanged()) this.dirty.add(a);
    if (this.allDirty) {
      this.allDirty = false;
      // Cleared addresses leave through the dirty set; every live one is in `addresses()`.
      for (const a of src.addresses()) this.dirty.add(a);
    }
    for (const a of this.dirty) this.retime(src, a);
    const n = this.dirty.size;
    this.dirty.clear();
    return n;
  }

  private retime(src: ScheduleSource, address: string): void {
    const seq = src.seqOf(address);
    let e = this.entries.get(address);
    if (seq === undefined) {
      if (e === undefined) return;
      this.unplace(e);
      this.entries.delete(address);
      return;
    }
    if (e === undefined) {
      e = { address, seq, dueAtMs: 0, heapIndex: -1, floorModel: undefined };
      this.entries.set(address, e);
    }
    this.unplace(e);
    e.seq = seq;
    const due = src.dueAtMs(address);
    if (due !== undefined) this.heap.set(e, due);
  }

  private unplace(e: DueEntry): void {
    this.heap.delete(e);
    if (e.floorModel === undefined) return;
    const set = this.floorParked.get(e.floorModel);
    set?.delete(e);
    if (set?.size === 0) this.floorParked.delete(e.floorModel);
    e.floorModel = undefined;
  }

  /**
   * Takes out every entry due by `nowMs` (plus a millisecond of slack: the
   * tick judges each exactly, so rounding in `since + timeout` never hides
   * one), in request-state creation order — the order a scan of every
   * address would judge them in, so decisions come out the same.
   */
  takeDue(nowMs: number): DueEntry[] {
    const due: DueEntry[] = [];
    for (let top = this.heap.peek(); top !== undefined && top.dueAtMs <= nowMs + 1; top = this.heap.peek()) {
      this.heap.pop();
      due.push(top);
    }
    due.sort((a, b) => a.seq - b.seq);
    return due;
  }

  /** Puts a taken entry back at `dueAtMs` (not yet due after all). */
  reschedule(e: DueEntry, dueAtMs: number): void {
    this.heap.set(e, dueAtMs);
  }

  /** Parks a taken entry on `model`'s replica floor until the model gains a ready instance. */
  parkOnFloor(e: DueEntry, model: string): void {
    let set = this.floorParked.get(model);
    if (set === undefined) {
      set = new Set();
      this.floorParked.set(model, set);
    }
    set.add(e);
    e.floorModel = model;
  }

  recordWork(retimed: number, visited: number): void {
    this.work = { retimed, visited, scheduled: this.heap.size };
  }

  lastWork(): TickWork {
    return this.work;
  }
}
