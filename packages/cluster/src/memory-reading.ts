import type { NodeResources } from "@warden/proto";
import type { MemoryReading } from "@warden/watchdog";

/** Heartbeat resources → the watchdog's memory reading (GPUs, else RAM). */
export function memoryReading(r: NodeResources): MemoryReading {
  return {
    gpus: r.gpus.map((g) => ({ index: g.index, totalBytes: Number(g.totalBytes), usedBytes: Number(g.usedBytes) })),
    ...(r.ramTotalBytes > 0n ? { ram: { totalBytes: Number(r.ramTotalBytes), usedBytes: Number(r.ramUsedBytes) } } : {}),
  };
}
