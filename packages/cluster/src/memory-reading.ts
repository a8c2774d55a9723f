import type { NodeResources } from "@warden/proto";
import type { MemoryReading } from "@warden/watchdog";

/** Heartbeat resources → the watchdog's memory reading (GPUs, else RAM). */
export function memoryReading(r: NodeResources): MemoryReading {
  return {
    gpus: r.gpus.map((g) => ({ index: g.index, totalBytes: Number(g.totalBytes), usedBytes: Number(g.usedBytes) })),
    ...(r.ramTotalBytes > 0n ? { ram: { totalBytes: Number(r.ramTotalBytes), usedBytes: Number(r.ramUsedBytes) } } : {}),
  };
}

/**
 * Whether two reports of a node's resources give the same figures (every
 * GPU's index, name, total and used bytes; RAM), whenever each was measured.
 */
export function sameReadings(a: NodeResources, b: NodeResources): boolean {
  if (a.ramTotalBytes !== b.ramTotalBytes || a.ramUsedBytes !== b.ramUsedBytes || a.gpus.length !== b.gpus.length) return false;
  for (let i = 0; i < a.gpus.length; i++) {
    const x = a.gpus[i];
    const y = b.gpus[i];
    if (x === undefined || y === undefined || x.index !== y.index || x.name !== y.name || x.totalBytes !== y.totalBytes || x.usedBytes !== y.usedBytes) return false;
  }
  return true;
}

/**
 * The kept reading's time set to `at`'s: copied into the kept Timestamp when
 * it has one, so a heartbeat's own Timestamp is not kept until the next one
 * (a second: long enough to be promoted, per node per heartbeat).
 */
export function keepMeasuredAt(kept: NodeResources, at: NodeResources["measuredAt"]): void {
  const mine = kept.measuredAt;
  if (mine === undefined || at === undefined) kept.measuredAt = at;
  else {
    mine.seconds = at.seconds;
    mine.nanos = at.nanos;
  }
}
