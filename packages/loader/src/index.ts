/**
 * @warden/loader — the coordinator's loader (DESIGN §3.3): placements, loads,
 * the stop sequence, leftovers and routing, behind ports.
 */
export { Loader, defaultStopTimings } from "./loader.js";
export type { DrainOptions } from "./drain-node.js";
export type { LoaderOptions, StopTimings } from "./loader.js";
export type { CallChange } from "./loader-options.js";
export { LockTable } from "./lifecycle-lock.js";
export type { Release } from "./lifecycle-lock.js";
export { LoadCooldown, defaultCooldownPolicy } from "./load-cooldown.js";
export type { CooldownPolicy } from "./load-cooldown.js";
export { LoadJobs, defaultLoadJobLimits } from "./load-jobs.js";
export type { LoadJob, LoadJobLimits, LoadJobPhase } from "./load-jobs.js";
export { LeftoverTracker } from "./leftover-tracker.js";
export type { Leftover } from "./leftover-tracker.js";
export { defaultReplicas, defaultRouting, loadRevision, modelSpec, replicaBounds } from "./model-spec.js";
export { isStale, loadDigest, startedDigest } from "./load-digest.js";
export type { ModelRouting, ModelSpec, ReplicaSettings, SpreadMode } from "./model-spec.js";
export type { ReplicaStatus, ScalePatch } from "./replica-status.js";
export { validateScale } from "./replica-settings.js";
export { ScaleBreakers, defaultBreakerPolicy } from "./scale-breaker.js";
export type { BreakerPolicy, BreakerState } from "./scale-breaker.js";
export type { AdoptionSource, LoaderEvent, LoaderEventSink, LoaderEventType } from "./loader-event.js";
export { GoneIncarnations } from "./gone-incarnations.js";
export type { JournalReplicas } from "./journal-replicas.js";
export { UnconfirmedReplicas } from "./unconfirmed-replicas.js";
export { RecoveryWindow, type RecoveryWindowState, type RecoveryOpenCause, type NodeSettlement } from "./recovery-window.js";
export type { UnconfirmedReplica } from "./unconfirmed-replicas.js";
export type { HeldInstance, InventoryAnswer, InventoryHit, InventoryPort, Lease, Placement, PlacementPort, RouteCandidate, RouteHint, UnloadOutcome } from "./loader-types.js";
export type * from "./ports.js";
