/**
 * The cluster listings.bench.ts reads: the coordinator's own AdminService
 * and CoordinatorMetrics over a real Loader and NodeRegistry, shaped as the
 * swarm bench's coordinator (swarm-run.ts): N registered ready nodes with
 * resources, 10 ready replicas on each, nodes split into groups of at most
 * 1 000 with 10 models of their own (no model past its replica max), and a
 * few leftovers. No agent or backend is contacted (their clients are stubs
 * that never answer).
 */
import { ManualClock, createUlidFactory, nullLogger, seededRng } from "@warden/common";
import type { Client } from "@warden/grpc";
import { Loader, modelSpec, type ModelSpec } from "@warden/loader";
import type { Outbox } from "@warden/outbox";
import type { AgentService, NodeResources } from "@warden/proto";
import type { ServiceImpl } from "@warden/grpc";
import type { AdminService } from "@warden/proto";
import { adminService, type AdminDeps } from "../../services/coordinator/src/admin/admin-service.js";
import { CoordinatorMetrics } from "../../services/coordinator/src/metrics.js";
import { NodeRegistry } from "../../services/coordinator/src/nodes/node-registry.js";
import { PlacementView } from "../../services/coordinator/src/admin/placement-view.js";
import type { BackendClientHandle } from "../../services/coordinator/src/routing/backend-connector.js";

const GiB = 1024 ** 3;
export const backendsPerNode = 10;

/** An AgentService client whose WatchBackends yields nothing until aborted. */
function silentAgent(): Client<typeof AgentService> {
  const stub = {
    watchBackends(_req: unknown, opts?: { signal?: AbortSignal }): AsyncIterable<never> {
      return {
        [Symbol.asyncIterator]: () => ({
          next: () =>
            new Promise<IteratorResult<never>>((resolve) => {
              const done = (): void => {
                resolve({ done: true, value: undefined });
              };
              if (opts?.signal === undefined || opts.signal.aborted) done();
              else opts.signal.addEventListener("abort", done, { once: true });
            }),
        }),
      };
    },
    close(): void {},
  };
  return stub as unknown as Client<typeof AgentService>;
}

function unusedPort(): never {
  throw new Error("no agent or backend is contacted");
}

export interface ListingsCluster {
  readonly clock: ManualClock;
  readonly loader: Loader<BackendClientHandle>;
  readonly registry: NodeRegistry;
  readonly admin: ServiceImpl<typeof AdminService>;
  readonly metrics: CoordinatorMetrics;
  readonly models: readonly ModelSpec[];
  close(): void;
}

/** `nodeCount` ready nodes × 10 ready replicas, and `leftovers` leftovers spread over the first nodes. */
export function listingsCluster(nodeCount: number, leftovers = 20): ListingsCluster {
  const clock = new ManualClock(1_000);
  const registry = new NodeRegistry({ clock, log: nullLogger, graceMs: 5_000, maxNodes: nodeCount, connect: () => silentAgent(), onNodeEvent: () => {} });
  const placement = new PlacementView(registry, "binpack");
  const groups = Math.ceil(nodeCount / 1_000);
  const models: ModelSpec[] = [];
  for (let k = 0; k < backendsPerNode * groups; k++) models.push(modelSpec({ id: `m${String(k)}`, backend: "backend-sim", sizeBytes: GiB, replicas: { min: 0, max: 1024, targetInFlight: 4, scaleDownAfterMs: 300_000 } }));
  models.push(modelSpec({ id: "unplaced", backend: "backend-sim", sizeBytes: GiB }));
  const rng = seededRng(43);
  const loader = new Loader<BackendClientHandle>({
    clock,
    rng,
    sleep: async () => {},
    agents: registry,
    backends: { connect: unusedPort },
    journal: { recordStopIntent: async () => {}, clearStopIntent: async () => {} },
    events: { emit: () => {}, emitDurable: async () => {} },
    placement,
    inventories: registry,
    mintIncarnation: createUlidFactory(clock, rng),
    models,
    policy: { limitPerNode: backendsPerNode + 2 },
  });
  registry.attach(loader, () => false);
  placement.attach(loader);
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(5, "0")}`;
    const ip = `10.${String(n >> 16)}.${String((n >> 8) & 255)}.${String(n & 255)}`;
    const rec = registry.register({ nodeId, address: `${ip}:7000`, labels: { zone: `z${String(n % 4)}` }, gpus: [], bootEpoch: 1n, backends: ["backend-sim"] });
    const resources: NodeResources = { $typeName: "warden.v1.NodeResources", gpus: [{ $typeName: "warden.v1.GpuInfo", index: 0, name: "fake", totalBytes: BigInt(80 * GiB), usedBytes: BigInt(10 * GiB) }], ramTotalBytes: BigInt(256 * GiB), ramUsedBytes: BigInt(32 * GiB) };
    rec.resources = resources;
    rec.inventory = [];
    rec.lastHeartbeatWallMs = clock.wallNow();
    const group = n % groups;
    for (let k = 0; k < backendsPerNode; k++) {
      const spec = models[group * backendsPerNode + k] as ModelSpec;
      loader.adoptRemoteOnly(spec, nodeId, `${ip}:${String(5000 + k)}`, `inc-${String(n)}-${String(k)}`);
    }
  }
  for (let i = 0; i < leftovers; i++) {
    const n = i % nodeCount;
    loader.adoptLeftover({ incarnation: `left-${String(i)}`, nodeId: `node-${String(n).padStart(5, "0")}`, model: `m${String(i % backendsPerNode)}`, address: `10.99.0.${String(i)}:6000`, lastError: "stop failed", foundBy: "inventory" });
  }
  // What the listings and ListModels read of the AdminService's dependencies (no hub, settings or HA here).
  const deps = { clock, loader, nodes: registry, placement } as unknown as AdminDeps;
  const outbox = { stats: () => ({ depth: 0, dropped: 0 }) } as unknown as Outbox;
  const metrics = new CoordinatorMetrics(loader, registry, outbox);
  return {
    clock,
    loader,
    registry,
    admin: adminService(deps),
    metrics,
    models,
    close() {
      loader.close();
      registry.close();
    },
  };
}
