/**
 * model → the incarnations the loader holds for it (every replica
 * is its own instance). Kept in step with the held table: `holdInstance`
 * adds, `dropHeld` removes (loader-state.ts); nothing else writes it. Sets
 * keep insertion order, so the oldest replica comes first. Lookups cost
 * O(replicas of that model), never a scan of every instance.
 */
export class ReplicaIndex {
  private readonly byModel = new Map<string, Set<string>>();
  /** model → the change count at its last add or remove (never reused: one counter for all models). */
  private readonly versions = new Map<string, number>();
  /** model → the change count at its last add, remove or phase change (replica counts; see `countsVersion`). */
  private readonly countVersions = new Map<string, number>();
  private changes = 0;
  /** Models whose replicas changed since `takeChanged` (bounded by the model table). */
  private readonly changed = new Set<string>();

  add(model: string, incarnation: string): void {
    let set = this.byModel.get(model);
    if (set === undefined) {
      set = new Set();
      this.byModel.set(model, set);
    }
    set.add(incarnation);
    this.versions.set(model, ++this.changes);
    this.countVersions.set(model, this.changes);
    this.changed.add(model);
  }

  remove(model: string, incarnation: string): void {
    const set = this.byModel.get(model);
    if (set === undefined) return;
    if (!set.delete(incarnation)) return;
    this.versions.set(model, ++this.changes);
    this.countVersions.set(model, this.changes);
    this.changed.add(model);
    if (set.size > 0) return;
    this.byModel.delete(model);
    this.versions.delete(model); // a later add takes a new count: no version repeats
    this.countVersions.delete(model);
  }

  /**
   * A held replica of `model` changed phase (starting → loading → ready):
   * the replica counts move, the routing order does not (`version` stays).
   * Call it from `setPhase` (loader-state.ts) only.
   */
  phaseChanged(model: string): void {
    if (this.byModel.has(model)) this.countVersions.set(model, ++this.changes);
  }

  /**
   * Changes whenever the model's held replicas are added, removed or change
   * phase; 0 while it has none. With the core's `modelVersion`, what a
   * cached replica count is keyed on (replica-counts.ts).
   */
  countsVersion(model: string): number {
    return this.countVersions.get(model) ?? 0;
  }

/** Models added, removed or changed here since the last call (the replica reconciler's dirty set). */
  takeChanged(): string[] {
    if (this.changed.size === 0) return [];
    const out = [...this.changed];
    this.changed.clear();
    return out;
  }

  /** Changes whenever the model's replicas do (replica-routes.ts rebuilds its order then); 0 before the first. */
  version(model: string): number {
    return this.versions.get(model) ?? 0;
  }

  /** The model's held incarnations, oldest first (a live view: copy before mutating the held table). */
  of(model: string): ReadonlySet<string> {
    return this.byModel.get(model) ?? empty;
  }

  count(model: string): number {
    return this.byModel.get(model)?.size ?? 0;
  }

  /** Models with at least one held replica. */
  models(): IterableIterator<string> {
    return this.byModel.keys();
  }
}

const empty: ReadonlySet<string> = new Set();
