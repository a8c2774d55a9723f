/**
 * @warden/watchdog — the pure watchdog core (DESIGN §3): request tracking by
 * address, every eviction path, admission per node, and the settle table;
 * plus the thin async facade that sends stops through a port.
 */
export { createWatchdogCore, WatchdogCore } from "./watchdog-core.js";
export type { LoaderQuery, WatchdogCoreOptions, ExplicitStopOptions, EvictionAsk, NodePlacementSummary } from "./watchdog-core.js";
export { createWatchdogService, WatchdogService } from "./watchdog-service.js";
export type { StopPort, SettleReport, EnforcementResult, AdmissionResult, ExplicitStopResult, WatchdogServiceOptions, Sleep } from "./watchdog-service.js";
export { retryEnforcement } from "./retry-enforcement.js";
export type { RetryEnforcementOptions } from "./retry-enforcement.js";
export { defaultPolicy, applyPolicyPatch, copyPolicy } from "./policy.js";
export type { WatchdogPolicy, PolicyPatch } from "./policy.js";
export { defaultCaps } from "./caps.js";
export type { ModelRule } from "./model-rules.js";
export type { WatchdogCaps } from "./caps.js";
export { stopOutcomeFromError } from "./stop-command.js";
export type { StopCommand, StopOutcome, EvictionReason, DetachedState } from "./stop-command.js";
export type {
  AdmissionDecision,
  EnforcementDecision,
  ExplicitSelection,
  LimitExceeded,
  Occupancy,
  RemoveResult,
  SettleResult,
  Shortfall,
  TickDecision,
} from "./decision.js";
export type { AdmissionRequest, InstanceSpec, InstanceStateName, InstanceView, OccupancyEntry, PendingEvictionView } from "./instance.js";
export type { MemoryDevice, MemoryReading, PressureChange } from "./memory-pressure.js";
export type { AddressRequestView, Completion } from "./request-tracker.js";
export type { TickWork } from "./tick-schedule.js";
export { DueHeap } from "./due-heap.js";
export type { HeapEntry } from "./due-heap.js";
export { checkSnapshotInvariants, groupConflicts } from "./watchdog-snapshot.js";
export type { NodeView, WatchdogSnapshot } from "./watchdog-snapshot.js";
export { compareVictims } from "./victim-order.js";
export type { OrderKey } from "./victim-order.js";
