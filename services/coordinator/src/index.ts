/** @warden/coordinator — the coordinator process's wiring, for `warden up`, the CLI and tests. */
export { startCoordinator } from "./coordinator.js";
export { embeddedAgentConfig } from "./nodes/embedded-node.js";
export type { Coordinator, CoordinatorDeps } from "./coordinator.js";
export { parseCoordinatorConfig, resolveCoordinatorConfig, parseSizeBytes } from "./config/coordinator-config.js";
export { AdmissionGate } from "./routing/admission-gate.js";
export type { CoordinatorConfig } from "./config/coordinator-config.js";
export { demoConfig } from "./config/demo-config.js";
export { nodeReportLimits, validateHeartbeat, validateRegister } from "./nodes/node-report-limits.js";
export { EventHub, eventInitOf } from "./admin/event-hub.js";
export { runCoordinator } from "./run-coordinator.js";
export type { RunCoordinatorOptions } from "./run-coordinator.js";
export { TokenTable, hashToken, mintToken, tokenLine, roles, type Principal, type Role } from "./auth/token-table.js";
export { adminMethodRoles, adminRoleFor } from "./auth/authenticator.js";
export type { AuthConfig } from "./auth/auth-config.js";
export { parseCoordinatorLimits, coordinatorLimitBounds, type CoordinatorLimits } from "./config/limits-config.js";
export { watchCallerOf } from "./auth/watch-caller.js";
export { defaultCoordinatorInboxPrefix } from "./config/nats-config.js";
