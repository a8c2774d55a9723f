import { DueHeap, type HeapEntry } from "@warden/watchdog";
import type { ModelSpec } from "./model-spec.js";

/** Where the changes to a model's replica picture come from (each drained on every pass). */
export interface ReplicaChangeSources {
  readonly models: ReadonlyMap<string, ModelSpec>;
  /** Models whose instances changed in the watchdog (`WatchdogCore.takeChangedModels`). */
  takeCoreChanges(): readonly string[];
  /** Models whose held replicas, journal-only replicas or breaker changed. */
  takeLoaderChanges(): Iterable<string>;
}

interface Wake extends HeapEntry {
  readonly model: string;
}

/** What the last reconciler pass looked at: a count, for tests. */
export interface ReplicaPassWork {
  /** Models the pass decided for. */
  readonly visited: number;
  /** Models with a timer of their own running (breaker, scale-down). */
  readonly waiting: number;
}

/**
 * Which models the replica reconciler must look at on a pass (replica-tick.ts):
 * those whose replica picture changed since (a replica added, dropped or
 * changing state, calls starting or ending at one, a load starting or ending,
 * the breaker, the journal-only replicas, the model's settings), those whose
 * own timer is due (the breaker lets a load start; an idle replica reaches
 * `scaleDownAfter`), and those whose last decision did something (it is asked
 * again, as a pass over every model would). Any other model would decide
 * nothing: its inputs are what they were when it last decided nothing, and
 * time alone changes only the two timers. A new model table (config reload)
 * is looked at whole once.
 */
export class ReplicaWork {
  private readonly dirty = new Set<string>();
  private readonly again = new Set<string>();
  private readonly wakes = new Map<string, Wake>();
  private readonly heap = new DueHeap<Wake>();
  private table: ReadonlyMap<string, ModelSpec> | undefined;
  private order = new Map<string, number>();
  private nextWakeSeq = 0;
  private work: ReplicaPassWork = { visited: 0, waiting: 0 };

  /** Something about `model`'s replicas changed that the sources do not see (its settings, a load, a ready phase). */
  mark(model: string): void {
    this.dirty.add(model);
  }

  /** The models to decide for at `nowMs`, in model-table order (the order a pass over every model takes). */
  take(src: ReplicaChangeSources, nowMs: number): ModelSpec[] {
    const models = src.models;
    if (models !== this.table) {
      // A new table: look at every model once, in its order.
      this.table = models;
      this.order = new Map([...models.keys()].map((m, i) => [m, i]));
      for (const m of models.keys()) this.dirty.add(m);
    }
    for (const m of src.takeCoreChanges()) this.dirty.add(m);
    for (const m of src.takeLoaderChanges()) this.dirty.add(m);
    for (const m of this.again) this.dirty.add(m);
    this.again.clear();
    for (let top = this.heap.peek(); top !== undefined && top.dueAtMs <= nowMs + 1; top = this.heap.peek()) {
      this.heap.pop();
      this.wakes.delete(top.model);
      this.dirty.add(top.model);
    }
    const out: ModelSpec[] = [];
    for (const m of this.dirty) {
      const spec = models.get(m);
      if (spec !== undefined) out.push(spec);
    }
    this.dirty.clear();
    out.sort((a, b) => (this.order.get(a.id) ?? 0) - (this.order.get(b.id) ?? 0));
    this.work = { visited: out.length, waiting: this.heap.size };
    return out;
  }

  /** The pass decided something for `model`: ask it again on the next pass. */
  decided(model: string): void {
    this.clearWake(model);
    this.again.add(model);
  }

  /** The pass decided nothing for `model`; `wakeAtMs` is when its own timer could change that (undefined: only a change can). */
  idle(model: string, wakeAtMs: number | undefined): void {
    this.clearWake(model);
    if (wakeAtMs === undefined) return;
    const w: Wake = { model, dueAtMs: wakeAtMs, seq: this.nextWakeSeq++, heapIndex: -1 };
    this.wakes.set(model, w);
    this.heap.set(w, wakeAtMs);
  }

  private clearWake(model: string): void {
    const w = this.wakes.get(model);
    if (w === undefined) return;
    this.heap.delete(w);
    this.wakes.delete(model);
  }

  lastWork(): ReplicaPassWork {
    return this.work;
  }
}
