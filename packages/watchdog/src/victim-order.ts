/** What ordering needs to know about a candidate. */
export interface OrderKey {
  /** Last used; undefined sorts as the oldest (LocalAI's zero time). */
  readonly lastUsedMs: number | undefined;
  /** 0 = unknown. */
  readonly sizeBytes: number;
  /** Registration order, the final tie-break so the order is total and reproducible. */
  readonly seq: number;
}

/**
 * Candidate order (localai-semantics §3.0): last-used ascending; when
 * size-aware, size descending first with unknown sizes after every known
 * one, then last-used ascending.
 */
export function compareVictims(a: OrderKey, b: OrderKey, sizeAware: boolean): number {
  if (sizeAware) {
    const ak = a.sizeBytes > 0;
    const bk = b.sizeBytes > 0;
    if (ak !== bk) return ak ? -1 : 1;
    if (a.sizeBytes !== b.sizeBytes) return b.sizeBytes - a.sizeBytes;
  }
  const al = a.lastUsedMs ?? Number.NEGATIVE_INFINITY;
  const bl = b.lastUsedMs ?? Number.NEGATIVE_INFINITY;
  if (al !== bl) return al < bl ? -1 : 1;
  return a.seq - b.seq;
}
