import type { OrphanProcess } from "@warden/proto";

/** What the tracker tells its owner about orphans. */
export interface OrphanTrackerOptions {
  /** Orphans older than this are stopped (reason orphan). */
  readonly graceMs: number;
  /** Orphans first seen in one heartbeat, in report order (never empty). */
  readonly onAdopted?: (nodeId: string, adopted: readonly OrphanProcess[]) => void;
  readonly onOrphan?: (nodeId: string, orphan: OrphanProcess, kind: "stopping" | "stopped" | "failed", detail: string) => void;
}

/**
 * Orphans are accounted from the first heartbeat that shows them (one
 * coalesced `orphan.adopted` event per heartbeat for all new ones) and
 * stopped once they outlive the grace. A stop in flight is not repeated; a
 * failed one is retried on a later heartbeat. Memory is bounded by what nodes
 * report (the caller bounds each report: nodeReportLimits.maxOrphans).
 */
export class OrphanTracker {
  /** node → "pid@address" → first seen (monotonic ms). */
  private readonly seen = new Map<string, Map<string, number>>();
  private readonly stops = new Set<string>();

  constructor(private readonly o: OrphanTrackerOptions) {}

  /**
   * One heartbeat's orphans for `nodeId`; no stops while `paused` (mass
   * unreachability). `stop` sends one (the agent re-checks the pid itself)
   * and rejects when it failed.
   */
  track(nodeId: string, orphans: readonly OrphanProcess[], nowMs: number, paused: boolean, stop: (orphan: OrphanProcess) => Promise<{ readonly alreadyGone: boolean }>): void {
    let seen = this.seen.get(nodeId);
    if (seen === undefined) {
      seen = new Map();
      this.seen.set(nodeId, seen);
    }
    const present = new Set<string>();
    const adopted: OrphanProcess[] = [];
    for (const o of orphans) {
      const key = `${String(o.pid)}@${o.address}`;
      if (present.has(key)) continue; // listed twice in one report: one orphan
      present.add(key);
      const first = seen.get(key);
      if (first === undefined) {
        seen.set(key, nowMs);
        adopted.push(o);
        continue;
      }
      const stopKey = `${nodeId}/${key}`;
      if (nowMs - first < this.o.graceMs || this.stops.has(stopKey) || paused) continue;
      this.stops.add(stopKey);
      this.o.onOrphan?.(nodeId, o, "stopping", "");
      stop(o).then(
        (r) => {
          this.o.onOrphan?.(nodeId, o, "stopped", r.alreadyGone ? "already gone" : "");
        },
        (err: unknown) => {
          this.stops.delete(stopKey); // retried on a later heartbeat
          this.o.onOrphan?.(nodeId, o, "failed", err instanceof Error ? err.message : String(err));
        },
      );
    }
    if (adopted.length > 0) this.o.onAdopted?.(nodeId, adopted);
    for (const key of [...seen.keys()]) {
      if (!present.has(key)) {
        seen.delete(key);
        this.stops.delete(`${nodeId}/${key}`);
      }
    }
  }
}
