/**
 * Incarnations known to be gone for good: a stop we sent was confirmed
 * (stopped, or already gone), or the agent reported the process exited.
 * Incarnations are minted once and never restarted, so a later report of one
 * of these (an inventory taken before the stop, delivered after it) is stale
 * by construction: it is never adopted, listed or stopped again.
 *
 * Bounded: the oldest entry leaves when the cap is reached. The node
 * registry's (boot epoch, sequence) fence covers stale inventories
 * independently of this memory, so losing an old entry does not reopen the
 * race; the memory only has to outlive a heartbeat in flight.
 */
export class GoneIncarnations {
  private readonly set = new Set<string>();

  /** @param cap entries kept, oldest out (default 4096). */
  constructor(readonly cap = 4096) {
    if (!Number.isInteger(cap) || cap < 1) throw new RangeError(`GoneIncarnations cap must be a positive integer, got ${String(cap)}`);
  }

  get size(): number {
    return this.set.size;
  }

  has(incarnation: string): boolean {
    return this.set.has(incarnation);
  }

  /** Records one; a repeat refreshes its age (it was just confirmed again). */
  add(incarnation: string): void {
    this.set.delete(incarnation);
    this.set.add(incarnation);
    if (this.set.size > this.cap) {
      const oldest = this.set.values().next().value;
      if (oldest !== undefined) this.set.delete(oldest);
    }
  }
}
