/** @warden/whatif — policy what-if: the workload trace's format, synthetic traces, and a replay through the production decision code on virtual time. */
export { EventQueue } from "./event-queue.js";
export { VirtualClock } from "./virtual-clock.js";
export { isTraceHeader, maxTraceDurationMs, maxTraceLineBytes, maxTraceNameLength, parseTraceLine, traceHeader, traceKind, traceVersion } from "./trace-format.js";
export type { AdminLine, CallClass, CallLine, GapLine, NodeEvent, LoadLine, MemLine, NodeLine, StopLine, TraceHeader, TraceLine } from "./trace-format.js";
export { checkSynthOptions, maxSynthCalls, maxSynthHours, maxSynthModels, maxSynthNodes, maxSynthRatePerSec, parseSynthModel, synthTrace } from "./synth-trace.js";
export type { SynthModel, SynthOptions } from "./synth-trace.js";
export { maxReplayLines, replayInput, replayTrace } from "./replay.js";
export type { ReplayConfig, ReplayGate, ReplayGateFactory, ReplayInput, ReplayOptions } from "./replay.js";
export { applyTimeline, isTimelineLine, parsePolicyChange } from "./replay-timeline.js";
export type { TimelineCounts, TimelineLine } from "./replay-timeline.js";
export type { NodeMemoryReport, ReplayReport } from "./replay-meter.js";
export { memoryChangeThreshold, memoryChanges, topChanges } from "./top-changes.js";
export type { MemoryChange } from "./top-changes.js";
export { pareto } from "./pareto.js";
