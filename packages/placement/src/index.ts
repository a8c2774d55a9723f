/** @warden/placement — where a load goes and why (DESIGN §3.5); pure. */
export { chosenReason, explainVerdict, lacksBackend, noFitListed, noFitReason, planPlacement } from "./plan-placement.js";
export type { NodeCandidate, NodeVerdict, PlacementPlan, PlacementRequest, PlacementStrategy } from "./plan-placement.js";
export { budgetBytes } from "./replica-constraints.js";
export type { PlacementMemoryBudget, ReplicaFacts, SpreadMode } from "./replica-constraints.js";
export { bundleOf, describePull, diskRoomBytes, formatBytes, pullBytesOf, pullNeedOf } from "./artifact-locality.js";
export type { ArtifactNeed, BundleFact, DiskFacts, PullNeed } from "./artifact-locality.js";
