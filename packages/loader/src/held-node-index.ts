import type { HeldInstance } from "./loader-types.js";
import type { BackendHandle } from "./ports.js";

/**
 * node → the instances the loader holds there, so a node's heartbeat
 * reconciles O(instances on that node), not every held instance. Kept in step
 * with the held table exactly like ReplicaIndex: `holdInstance` adds,
 * `dropHeld` removes (loader-state.ts), nothing else writes it; a held
 * instance's node never changes. It holds the records themselves (not ids
 * looked up again), so an entry left behind would show, never be filtered
 * away. Maps keep insertion order (oldest first).
 *
 * Each node's set also carries a stamp (see {@link stamp}) so a heartbeat
 * that changes nothing can tell in O(1) that the set is the one it last
 * reconciled against.
 */
export class HeldNodeIndex<H extends BackendHandle> {
  private readonly byNode = new Map<string, { readonly held: Map<string, HeldInstance<H>>; stamp: number }>();
  /** Last stamp handed out; stamps are never reused (2^53 changes are out of reach). */
  private lastStamp = 0;

  add(h: HeldInstance<H>): void {
    let m = this.byNode.get(h.nodeId);
    if (m === undefined) {
      m = { held: new Map(), stamp: 0 };
      this.byNode.set(h.nodeId, m);
    }
    m.held.set(h.incarnation, h);
    m.stamp = ++this.lastStamp;
  }

  remove(h: HeldInstance<H>): void {
    const m = this.byNode.get(h.nodeId);
    if (m?.held.delete(h.incarnation) !== true) return;
    m.stamp = ++this.lastStamp;
    // An empty node's entry goes (stamp 0 again): memory stays bounded by the nodes holding something.
    if (m.held.size === 0) this.byNode.delete(h.nodeId);
  }

  /**
   * Which set of instances the node holds: 0 while it holds none, otherwise a
   * number no other content of that node's set ever had (every add and remove
   * takes a fresh one). Equal stamps at two moments mean the same instances
   * (their phases may differ). O(1).
   */
  stamp(nodeId: string): number {
    return this.byNode.get(nodeId)?.stamp ?? 0;
  }

  /** The node's held instances, oldest first (a copy: the caller may drop some while it walks them). */
  on(nodeId: string): HeldInstance<H>[] {
    const m = this.byNode.get(nodeId);
    return m === undefined ? [] : [...m.held.values()];
  }

  /** Nodes with at least one held instance. */
  nodes(): IterableIterator<string> {
    return this.byNode.keys();
  }
}
