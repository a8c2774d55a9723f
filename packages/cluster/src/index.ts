/**
 * @warden/cluster — the coordinator's view of its nodes (DESIGN §1): health
 * (ready / unreachable / lost, the mass-unreachability guard), heartbeat
 * ordering and (boot epoch, sequence) fencing, inventory reconciliation with
 * the loader, orphan and foreign tracking, and placement's view of the nodes.
 * Pure, behind ports: agents are reached through an AgentConnector.
 */
export { NodeTable } from "./node-table.js";
export type { NodeEventKind, NodeTableOptions } from "./node-table.js";
export type { HeartbeatAnswer, HeartbeatReport, NodeHealthState, NodeRecord, NodeRegistration } from "./node-record.js";
export { awaitsInventory } from "./node-record.js";
export { applyInventoryDelta, fullReported } from "./inventory-delta.js";
export type { InventoryDeltaReport, ReportedEntry, ReportedInventory } from "./inventory-delta.js";
export type { AgentConnector, BackendExit } from "./agent-connector.js";
export { massUnreachability, nextHealth } from "./node-health.js";
export type { HealthCause, Unreachability } from "./node-health.js";
export { heartbeatOrder, sequenceBounds, sequenceOutOfBounds } from "./heartbeat-order.js";
export type { HeartbeatOrder } from "./heartbeat-order.js";
export { fenceIncarnation, maxFencesPerNode, unfencedInventory } from "./incarnation-fences.js";
export { otherNodesIncarnation, reconcileInventory } from "./reconcile-inventory.js";
export { settledMark, unchangedHeartbeat } from "./unchanged-heartbeat.js";
export type { AfterReconcile, SettledMark, UnchangedInput } from "./unchanged-heartbeat.js";
export { goneIntents } from "./gone-intents.js";
export type { GoneIntents } from "./gone-intents.js";
export type { Adoption, ReconcileInput } from "./reconcile-inventory.js";
export { OrphanTracker } from "./orphan-tracker.js";
export type { OrphanTrackerOptions } from "./orphan-tracker.js";
export { freshForeign } from "./fresh-foreign.js";
export { memoryReading } from "./memory-reading.js";
export { PlacementView } from "./placement-view.js";
export type { ExplainedPlan, PlacementNode, PlacementNodes, PlacementSlicing } from "./placement-view.js";
export { pageRange, type ExplainPage, type PageRange } from "./explain-page.js";
export { defaultMaxReplicasPerModel } from "./node-limits.js";
export type { MemoryBudget, NodeLimits } from "./node-limits.js";
export { OutageProbes } from "./outage-probes.js";
export type { DueProbe, OutageProbeState, OutageProbesOptions, ProbeChange } from "./outage-probes.js";
