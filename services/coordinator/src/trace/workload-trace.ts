import { join } from "node:path";
import type { Clock, Logger } from "@warden/common";
import type { EventHub } from "../admin/event-hub.js";
import type { RoutedCallObserver } from "../routing/routed-call.js";
import { TraceRecorder, type TraceSettings } from "./trace-recorder.js";
import { exportTrace } from "./trace-export.js";
import { sampleNodeMemory, traceCalls, traceLineOf, type TracedNodes } from "./trace-taps.js";

/** The trace directory under a coordinator's state dir. */
export function traceDir(stateDir: string): string {
  return join(stateDir, "trace");
}

/**
 * Starts the workload trace (docs/policy-what-if.md): calls through `calls`
 * (the routed-calls observer), loads/evictions/nodes/operator changes from
 * the event hub, node memory sampled every minute. Returns the recorder
 * (its close flushes), or undefined when `trace.enabled` is false.
 */
export async function startWorkloadTrace(o: { readonly settings: TraceSettings; readonly stateDir: string; readonly clock: Clock; readonly log: Logger; readonly nodes: TracedNodes; readonly hub: EventHub }): Promise<(TraceRecorder & { readonly calls: RoutedCallObserver }) | undefined> {
  if (!o.settings.enabled) return undefined;
  const recorder = await TraceRecorder.open({ dir: traceDir(o.stateDir), maxBytes: o.settings.maxBytes, clock: o.clock, log: o.log });
  const sampler = sampleNodeMemory(o.nodes, o.clock, recorder);
  o.hub.observe((e) => {
    const line = traceLineOf(e, o.clock.wallNow());
    if (line === undefined) return;
    recorder.record(line);
    if (line.t === "node" && line.ev === "joined") sampler.joined(line.node);
  });
  const close = recorder.close.bind(recorder);
  recorder.close = async (): Promise<void> => {
    sampler.cancel();
    await close();
  };
  return Object.assign(recorder, { calls: traceCalls(o.clock, recorder) });
}

/** ExportTrace's source: what is buffered is flushed first, so the export ends with the latest calls. */
export function traceExporter(recorder: TraceRecorder | undefined, stateDir: string): { exportTrace?: (sinceWallMs: number, signal: AbortSignal) => AsyncIterable<Uint8Array> } {
  if (recorder === undefined) return {};
  return {
    exportTrace: async function* (sinceWallMs, signal) {
      await recorder.flush();
      yield* exportTrace(traceDir(stateDir), sinceWallMs, signal);
    },
  };
}
