/**
 * Replayed events of an older leader epoch not yet acknowledged, and how
 * many of each epoch: an event goes out only when none of an older epoch
 * is outstanding, so the stream never holds an older epoch after a newer.
 */
export class OlderTerms {
  private readonly epochOf = new Map<string, bigint>();
  private readonly counts = new Map<bigint, number>();

  /** Replayed events still outstanding. */
  get size(): number {
    return this.epochOf.size;
  }

  add(id: string, epoch: bigint): void {
    this.epochOf.set(id, epoch);
    this.counts.set(epoch, (this.counts.get(epoch) ?? 0) + 1);
  }

  /** The event was acknowledged (or will never be sent); a no-op for one not held. */
  settle(id: string): void {
    const e = this.epochOf.get(id);
    if (e === undefined) return;
    this.epochOf.delete(id);
    const n = (this.counts.get(e) ?? 1) - 1;
    if (n > 0) this.counts.set(e, n);
    else this.counts.delete(e);
  }

  /** The oldest leader epoch with an event outstanding (few distinct epochs: one per term that left events behind). */
  oldest(): bigint | undefined {
    let min: bigint | undefined;
    for (const e of this.counts.keys()) if (min === undefined || e < min) min = e;
    return min;
  }
}
