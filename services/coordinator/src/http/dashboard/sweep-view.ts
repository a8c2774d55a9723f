/**
 * The Policy page's what-if sweep as the browser receives it (POST
 * /api/dashboard/policy/sweep): shared by the server (policy-sweep.ts) and
 * the client (client/policy-sweep-view.ts), so it imports nothing.
 */

/** The policy fields a sweep may vary (the Policy page's fields). */
export type SweepField = "limitPerNode" | "idleCheck" | "idleTimeoutMs" | "busyCheck" | "busyTimeoutMs" | "memoryReclaimer" | "memoryThreshold" | "forceEvictionWhenBusy" | "sizeAware";
export type SweepPoint = Readonly<Partial<Record<SweepField, number | boolean>>>;

/** One candidate's outcome, as the page plots and tabulates it. */
export interface SweepRow {
  /** The changed fields (empty: the live policy). */
  readonly point: SweepPoint;
  readonly coldStarts: number;
  readonly evictions: number;
  readonly evictionsByReason: Readonly<Record<string, number>>;
  readonly callsWaited: number;
  readonly waitP50Ms: number;
  readonly waitP99Ms: number;
  readonly failedCalls: number;
  /** The largest of the nodes' peaks. */
  readonly peakBytes: number;
  readonly idleInstanceHours: number;
  /** On the Pareto front of cold starts against idle GPU-hours (no other row beats it on both). */
  readonly pareto: boolean;
}

export interface SweepResult {
  readonly calls: number;
  readonly spanMs: number;
  readonly nodes: number;
  /** The live policy's replay first, then each point in grid order. */
  readonly rows: readonly SweepRow[];
  readonly elapsedMs: number;
}
