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
 */
export class HeldNodeIndex<H extends BackendHandle> {
  private readonly byNode = new Map<string, Map<string, HeldInstance<H>>>();

  add(h: HeldInstance<H>): void {
    let m = this.byNode.get(h.nodeId);
    if (m === undefined) {
      m = new Map();
      this.byNode.set(h.nodeId, m);
    }
    m.set(h.incarnation, h);
  }

  remove(h: HeldInstance<H>): void {
    const m = this.byNode.get(h.nodeId);
    if (m === undefined) return;
    m.delete(h.incarnation);
    if (m.size === 0) this.byNode.delete(h.nodeId);
  }

  /** The node's held instances, oldest first (a copy: the caller may drop some while it walks them). */
  on(nodeId: string): HeldInstance<H>[] {
    const m = this.byNode.get(nodeId);
    return m === undefined ? [] : [...m.values()];
  }

  /** Nodes with at least one held instance. */
  nodes(): IterableIterator<string> {
    return this.byNode.keys();
  }
}
