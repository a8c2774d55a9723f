import { create } from "@bufbuild/protobuf";
import { join } from "node:path";
import { AgentService, InventoryEntrySchema, NodeResourcesSchema, OrphanProcessSchema, type ArtifactStoreService, type NodeService } from "@warden/proto";
import { inProcessClient, type ServiceImpl } from "@warden/grpc";
import { wardenVersion, type Clock, type Logger, type Rng } from "@warden/common";
import { RegistryCredentials, builtinCatalog, createAgent, createNodeHeartbeat, inProcessContext, inProcessNodeService, placementLimitsMessage, resolveAgentConfig, type Agent, type NodeHeartbeat } from "@warden/agent";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import type { NodeRegistry } from "./node-registry.js";

/** The embedded agent's config: the operator's `agent:` section over single-machine defaults. */
export function embeddedAgentConfig(config: CoordinatorConfig): ReturnType<typeof resolveAgentConfig> {
  return resolveAgentConfig(
    {
      nodeId: "local",
      stateDir: join(config.stateDir, "agent"),
      // A random first port: two `warden up` on one machine (or a test run beside `npm start`) both
      // found 21000 free at the same moment and one backend exited unable to bind.
      ports: { min: 21000, max: 21999, start: "random" },
      catalog: { "backend-sim": { builtin: "backend-sim" } },
      ...(config.auth.backendTokenFile === undefined ? {} : { backendTokenFile: config.auth.backendTokenFile }),
      ...config.agent,
    },
    builtinCatalog,
  );
}

/**
 * Starts the embedded agent (`embeddedAgent: true`), registers its node and
 * seeds its inventory now, so "is it loaded anywhere?" has an answer before
 * the first heartbeat (the agent is in this process: no doubt), then reports
 * through the same heartbeat path as a remote agent, in process.
 */
export async function startEmbeddedNode(o: {
  readonly config: CoordinatorConfig;
  readonly clock: Clock;
  readonly rng: Rng;
  readonly log: Logger;
  readonly nodes: NodeRegistry;
  readonly nodeImpl: Pick<ServiceImpl<typeof NodeService>, "register" | "heartbeat">;
  /** The coordinator's artifact store, read in process by the embedded agent (`store:` sources). */
  readonly storeImpl?: ServiceImpl<typeof ArtifactStoreService>;
}): Promise<{ readonly agent: Agent; readonly heartbeat: NodeHeartbeat }> {
  const agentConfig = embeddedAgentConfig(o.config);
  const store = o.storeImpl;
  const logger = o.log.child({ component: "embedded-agent" });
  // `agent.registryAuthFile`: read once at start (the coordinator does not reload it).
  const registries = agentConfig.registryAuthFile === "" ? undefined : new RegistryCredentials(agentConfig.registryAuthFile, "agent.registryAuthFile", logger);
  const agent = createAgent(agentConfig, {
    clock: o.clock,
    logger,
    ...(registries === undefined ? {} : { registryLogin: registries.lookup }),
    ...(store === undefined ? {} : { storeReader: (path: string, offset: number, signal: AbortSignal) => inProcessStoreRead(store, agentConfig.nodeId, path, offset, signal) }),
  });
  await agent.start();
  o.nodes.register({
    nodeId: agentConfig.nodeId,
    address: "in-process",
    labels: { ...agentConfig.labels },
    gpus: [],
    bootEpoch: BigInt(agent.bootEpochMs),
    embedded: true,
    client: inProcessClient(AgentService, agent.service),
    version: wardenVersion,
    backends: Object.keys(agentConfig.catalog),
    // Checked by the agent's own config parser (the same bounds as Register's).
    limits: agentConfig.placementLimits,
  });
  const inv = await agent.inventory();
  o.nodes.heartbeat({
    nodeId: agentConfig.nodeId,
    bootEpoch: BigInt(agent.bootEpochMs),
    sequence: 0n,
    backends: inv.backends.map((b) => create(InventoryEntrySchema, b)),
    orphans: inv.orphans.map((x) => create(OrphanProcessSchema, x)),
    resources: create(NodeResourcesSchema, await agent.nodeResources()),
  });
  const heartbeat = createNodeHeartbeat({
    nodeId: agentConfig.nodeId,
    address: "in-process",
    labels: agentConfig.labels,
    backends: Object.keys(agentConfig.catalog),
    limits: placementLimitsMessage(agentConfig.placementLimits),
    source: agent,
    node: inProcessNodeService(o.nodeImpl),
    intervalMs: agentConfig.heartbeatIntervalMs,
    clock: o.clock,
    rng: o.rng,
    logger: o.log.child({ component: "embedded-heartbeat" }),
  });
  heartbeat.start();
  return { agent, heartbeat };
}

/** The store read in process (no socket: the embedded agent's `store:` pulls). */
async function* inProcessStoreRead(store: ServiceImpl<typeof ArtifactStoreService>, nodeId: string, path: string, offset: number, signal: AbortSignal): AsyncGenerator<{ offset: bigint; totalBytes: bigint; data: Uint8Array }> {
  for await (const c of store.readArtifact({ $typeName: "warden.v1.ReadArtifactRequest", nodeId, path, offset: BigInt(offset) }, inProcessContext({ signal }))) {
    yield { offset: c.offset ?? 0n, totalBytes: c.totalBytes ?? 0n, data: c.data ?? new Uint8Array() };
  }
}
