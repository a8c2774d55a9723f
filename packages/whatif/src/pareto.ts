import type { ReplayReport } from "./replay-meter.js";

/**
 * Sweep points no other point beats on both cold starts and GPU-hours held
 * idle (the trade an idle timeout or a limit makes). O(n²) over at most a
 * sweep's points (tens).
 */
export function pareto<T extends { readonly report: Pick<ReplayReport, "coldStarts" | "idleInstanceHours"> }>(rs: readonly T[]): T[] {
  return rs.filter((a) => !rs.some((b) => b !== a && b.report.coldStarts <= a.report.coldStarts && b.report.idleInstanceHours <= a.report.idleInstanceHours && (b.report.coldStarts < a.report.coldStarts || b.report.idleInstanceHours < a.report.idleInstanceHours)));
}
