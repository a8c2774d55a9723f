// Public API of the Warden agent. The coordinator embeds an agent in process
// with createAgent(...) and reports it through createNodeHeartbeat(...).
export { createAgent, type Agent, type AgentDeps, type AdoptionReport, type InventorySnapshot, type NodeResourcesInit } from "./agent.js";
export { parseAgentConfig, resolveAgentConfig, type AgentConfig, type AgentConfigInput, type ReadinessConfig } from "./agent-config.js";
export type { BuiltinCatalog, CatalogEntry } from "./catalog-entry.js";
export { backendSimCatalogEntry, backendSimMainPath, builtinCatalog } from "./backend-sim-catalog.js";
export { createNodeHeartbeat, inProcessNodeService, type NodeHeartbeat, type NodeHeartbeatOptions, type NodeServicePort, type HeartbeatSource, type HeartbeatStats, type NodeCallOptions } from "./node-heartbeat.js";
export { parseAgentArgs, agentUsage, type AgentArgs } from "./agent-args.js";
export { placementLimitsMessage, type AgentPlacementLimits } from "./agent-placement-limits.js";
export { inProcessContext } from "./in-process-context.js";
export type { BackendPhase, StopOutcome } from "./backend-process.js";
export { servePrometheus } from "./prometheus-server.js";
export { checkAgentFiles, writableDir } from "./agent-files.js";
export { RegistryCredentials } from "./registry-credentials.js";
