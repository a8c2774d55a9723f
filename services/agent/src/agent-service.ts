import type { ServiceImpl } from "@warden/grpc";
import type { AgentService } from "@warden/proto";
import type { AgentContext } from "./agent-context.js";
import type { InventorySnapshot, NodeResourcesInit } from "./inventory.js";
import { createStartBackend } from "./start-backend.js";
import { createStopBackend } from "./stop-backend.js";
import { createFreeBackend } from "./free-backend.js";
import { createGetBackendLogs } from "./get-backend-logs.js";
import { withCommandAudit } from "./command-audit.js";
import { createBundleHandlers } from "./bundle-service.js";

export interface AgentServiceParts {
  bootEpochMs: number;
  inventory: (signal?: AbortSignal) => Promise<InventorySnapshot>;
  nodeResources: (signal?: AbortSignal) => Promise<NodeResourcesInit>;
}

/** The AgentService handlers, each command logged with its caller (command-audit.ts); each RPC's contract is in services/agent/README.md. */
export function createAgentService(ctx: AgentContext, parts: AgentServiceParts): ServiceImpl<typeof AgentService> {
  const { config, hub, scan } = ctx;
  const { bootEpochMs, inventory, nodeResources } = parts;
  return withCommandAudit({
    startBackend: createStartBackend(ctx),
    stopBackend: createStopBackend(ctx),
    stopOrphan: scan.stopOrphan,
    freeBackend: createFreeBackend(ctx),
    ...createBundleHandlers(ctx),
    getBackendLogs: createGetBackendLogs(ctx),
    async listBackends(_req, callCtx) {
      const inv = await inventory(callCtx.signal);
      return { backends: inv.backends, orphans: inv.orphans, foreign: inv.foreign, bootEpoch: BigInt(bootEpochMs), leaderEpoch: inv.leaderEpoch };
    },
    async getNodeStatus(_req, callCtx) {
      return { nodeId: config.nodeId, labels: { ...config.labels }, resources: await nodeResources(callCtx.signal), bootEpoch: BigInt(bootEpochMs) };
    },
    async *watchBackends(_req, callCtx) {
      yield* hub.subscribe(AbortSignal.any([callCtx.signal, ctx.closing, ctx.watchesEnded]));
    },
  }, ctx.logger);
}
