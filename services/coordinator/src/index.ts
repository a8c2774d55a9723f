/** @warden/coordinator — the coordinator process's wiring, for `warden up`, the CLI and tests. */
export { startCoordinator } from "./coordinator.js";
export { embeddedAgentConfig } from "./embedded-node.js";
export type { Coordinator, CoordinatorDeps } from "./coordinator.js";
export { parseCoordinatorConfig, resolveCoordinatorConfig, parseSizeBytes } from "./coordinator-config.js";
export type { CoordinatorConfig } from "./coordinator-config.js";
export { demoConfig } from "./demo-config.js";
export { nodeReportLimits, validateHeartbeat, validateRegister } from "./node-report-limits.js";
export { EventHub, eventInitOf } from "./event-hub.js";
export { runCoordinator } from "./run-coordinator.js";
export type { RunCoordinatorOptions } from "./run-coordinator.js";
export { TokenTable, hashToken, mintToken, tokenLine, roles, type Principal, type Role } from "./token-table.js";
export { adminMethodRoles, adminRoleFor } from "./authenticator.js";
export type { AuthConfig } from "./auth-config.js";
export { parseCoordinatorLimits, coordinatorLimitBounds, type CoordinatorLimits } from "./limits-config.js";
export { watchCallerOf } from "./watch-caller.js";
export { defaultCoordinatorInboxPrefix } from "./nats-config.js";
