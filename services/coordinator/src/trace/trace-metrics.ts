import { Counter, type Registry } from "prom-client";
import type { DropReason, TraceRecorder } from "./trace-recorder.js";

const reasons: readonly DropReason[] = ["buffer-full", "write-failed"];

/**
 * `warden_trace_dropped_lines_total{reason}`: workload trace lines the
 * recorder dropped because its buffer was full or a write failed. Alert on
 * any increase: the trace has a gap there (a gap line marks it, and a replay
 * warns of it). Read at scrape time from the recorder; no series when the
 * trace is off.
 */
export function registerTraceMetrics(registry: Registry, recorder: Pick<TraceRecorder, "droppedByReason">): void {
  new Counter({
    name: "warden_trace_dropped_lines_total",
    help: "Workload trace lines dropped (buffer full, or a failed write), by reason: the trace has a gap.",
    labelNames: ["reason"],
    registers: [registry],
    collect() {
      this.reset();
      const d = recorder.droppedByReason();
      for (const reason of reasons) this.inc({ reason }, d[reason]);
    },
  });
}
