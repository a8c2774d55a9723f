/** An instance a restarted coordinator knows only from its journal (its last event was not terminal). */
export interface UnconfirmedReplica {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  readonly address: string;
}

/**
 * Instances the journal says were running, on nodes that have not reported an
 * inventory since this coordinator started. They are not held (nothing routes
 * to them, nothing stops them), but they count as present on their node for
 * every placement rule — their model's `max` and the node's
 * `maxReplicasPerModel` here and in placement, and through the watchdog's
 * occupancy (kind `unconfirmed`) its exclusive groups, its LRU limit and its
 * memory — until the node reports (its inventory adopts the ones still
 * running), is lost, or an operator forgets one: without them a node that
 * comes back after the recovery window brings replicas, or a member of an
 * exclusive group, on top of the ones placed meanwhile. Indexed by model and by node so a count costs
 * O(1) and a node's report O(its entries).
 */
export class UnconfirmedReplicas {
  private readonly byIncarnation = new Map<string, UnconfirmedReplica>();
  private readonly byModel = new Map<string, Set<string>>();
  private readonly byNode = new Map<string, Set<string>>();
  /** Models whose entries changed since `takeChanged` (bounded by the models of the journal). */
  private readonly changed = new Set<string>();

  /** False (nothing changes) when the incarnation is already listed. */
  add(r: UnconfirmedReplica): boolean {
    if (this.byIncarnation.has(r.incarnation)) return false;
    const copy = { incarnation: r.incarnation, nodeId: r.nodeId, model: r.model, address: r.address };
    this.byIncarnation.set(r.incarnation, copy);
    addTo(this.byModel, r.model, r.incarnation);
    addTo(this.byNode, r.nodeId, r.incarnation);
    this.changed.add(r.model);
    return true;
  }

  remove(incarnation: string): UnconfirmedReplica | undefined {
    const r = this.byIncarnation.get(incarnation);
    if (r === undefined) return undefined;
    this.byIncarnation.delete(incarnation);
    removeFrom(this.byModel, r.model, incarnation);
    removeFrom(this.byNode, r.nodeId, incarnation);
    this.changed.add(r.model);
    return r;
  }

  /** Removes and returns every entry on `nodeId` (it reported, or was lost). */
  removeNode(nodeId: string): UnconfirmedReplica[] {
    const incs = this.byNode.get(nodeId);
    if (incs === undefined) return [];
    const out: UnconfirmedReplica[] = [];
    for (const inc of [...incs]) {
      const r = this.remove(inc);
      if (r !== undefined) out.push(r);
    }
    return out;
  }

  get(incarnation: string): UnconfirmedReplica | undefined {
    return this.byIncarnation.get(incarnation);
  }

/** Models added, removed or changed here since the last call (the replica reconciler's dirty set). */
  takeChanged(): string[] {
    if (this.changed.size === 0) return [];
    const out = [...this.changed];
    this.changed.clear();
    return out;
  }

  /** Entries of `model` (every node). */
  count(model: string): number {
    return this.byModel.get(model)?.size ?? 0;
  }

  /** The model's entries, for a per-node count (placement). */
  ofModel(model: string): IterableIterator<UnconfirmedReplica> {
    return this.entries(this.byModel.get(model));
  }

  /** The node's entries (the watchdog counts them on it: pushOccupancy). */
  onNode(nodeId: string): IterableIterator<UnconfirmedReplica> {
    return this.entries(this.byNode.get(nodeId));
  }

  /** Nodes with at least one entry. */
  nodes(): IterableIterator<string> {
    return this.byNode.keys();
  }

  get size(): number {
    return this.byIncarnation.size;
  }

  list(): UnconfirmedReplica[] {
    return [...this.byIncarnation.values()];
  }

  private *entries(incs: ReadonlySet<string> | undefined): IterableIterator<UnconfirmedReplica> {
    if (incs === undefined) return;
    for (const inc of incs) {
      const r = this.byIncarnation.get(inc);
      if (r !== undefined) yield r;
    }
  }
}

function addTo(m: Map<string, Set<string>>, key: string, inc: string): void {
  let set = m.get(key);
  if (set === undefined) {
    set = new Set();
    m.set(key, set);
  }
  set.add(inc);
}

function removeFrom(m: Map<string, Set<string>>, key: string, inc: string): void {
  const set = m.get(key);
  if (set === undefined) return;
  set.delete(inc);
  if (set.size === 0) m.delete(key);
}
