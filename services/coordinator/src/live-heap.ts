import { PerformanceObserver, constants, type PerformanceEntry } from "node:perf_hooks";
import { getHeapStatistics } from "node:v8";

/**
 * The V8 heap in use right after the last major (mark-compact) collection:
 * the live set. RSS and the heap's "used" figure between collections include
 * garbage V8 has not collected yet — under a busy coordinator that is several
 * times the live set (at 1 000 nodes: 75–90 MiB live, heap used climbing to
 * about 340 MiB between major collections a minute apart), so neither says
 * what the coordinator holds.
 *
 * One observer per process, started on first use and kept: a major
 * collection is rare (seconds to minutes apart) and the reading is one call.
 */
let liveBytes: number | undefined;
let observer: PerformanceObserver | undefined;

function observe(): void {
  if (observer !== undefined) return;
  observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if ((e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) liveBytes = getHeapStatistics().used_heap_size;
    }
  });
  observer.observe({ entryTypes: ["gc"] });
}

/** Bytes live after the last major collection; before the first one, the heap in use now. */
export function liveHeapBytes(): number {
  observe();
  return liveBytes ?? getHeapStatistics().used_heap_size;
}
