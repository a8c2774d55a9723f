import { invalidArgument } from "@warden/common";

/**
 * A bounded set of recently seen ids (first in, first out): the subscriber's
 * de-duplication memory beyond JetStream's duplicate window. Memory is
 * O(capacity): about 100 bytes per 26-character ULID, so the default 100 000
 * ids cost about 10 MB. An id older than `capacity` later ids can be reported
 * unseen again; publishers re-send within minutes or hours, not after 100 000
 * newer events, so this is the accepted bound.
 */
export class RecentIdSet {
  readonly capacity: number;
  private readonly ids = new Set<string>();

  constructor(capacity = 100_000) {
    if (!Number.isInteger(capacity) || capacity < 1) throw invalidArgument("capacity", `must be an integer >= 1, got ${String(capacity)}`);
    this.capacity = capacity;
  }

  get size(): number {
    return this.ids.size;
  }

  has(id: string): boolean {
    return this.ids.has(id);
  }

  /** Adds `id`; returns false when it was already present (a duplicate). */
  add(id: string): boolean {
    if (this.ids.has(id)) return false;
    this.ids.add(id);
    if (this.ids.size > this.capacity) {
      const oldest = this.ids.values().next();
      if (oldest.done !== true) this.ids.delete(oldest.value);
    }
    return true;
  }
}
