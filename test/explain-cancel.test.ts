/**
 * ExplainPlacement over real gRPC on loopback, served by the coordinator's
 * own AdminService over a real Loader, NodeRegistry and PlacementView with
 * a large cluster: a caller that cancels mid-call stops the server's work
 * (the per-node summaries stop being computed), and a caller that stays gets
 * every node. No agent is contacted (their clients are stubs that never
 * answer); nothing here is timed.
 */
import { describe, expect, it, vi } from "vitest";
import { Code, ManualClock, createUlidFactory, isWardenError, nullLogger, seededRng } from "@warden/common";
import { GrpcServer, createClient, type Client, type HandlerContext } from "@warden/grpc";
import { Loader, modelSpec, type BackendHandle, type ModelSpec } from "@warden/loader";
import { AdminService, type AgentService, type ExplainPlacementRequest } from "@warden/proto";
import { adminService, type AdminDeps } from "../services/coordinator/src/admin/admin-service.js";
import { macrotask } from "../services/coordinator/src/admin/work-slicer.js";
import { NodeRegistry } from "../services/coordinator/src/nodes/node-registry.js";
import { PlacementView } from "../services/coordinator/src/admin/placement-view.js";

const GiB = 1024 ** 3;
const nodeCount = 1_000;
const perNode = 4;

/** An AgentService client whose WatchBackends yields nothing until aborted; explain calls no agent. */
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

/** A cluster of `nodeCount` nodes with `perNode` instances each, every node at its limit (its evictions are read). */
function cluster(): { loader: Loader; registry: NodeRegistry; placement: PlacementView; spec: ModelSpec } {
  const clock = new ManualClock(1_000);
  const registry = new NodeRegistry({ clock, log: nullLogger, graceMs: 5_000, connect: () => silentAgent(), onNodeEvent: () => {} });
  const placement = new PlacementView(registry, "binpack");
  const models: ModelSpec[] = [];
  for (let i = 0; i < perNode; i++) models.push(modelSpec({ id: `m${String(i)}`, backend: "b", sizeBytes: GiB }));
  const spec = modelSpec({ id: "incoming", backend: "b", sizeBytes: GiB });
  const rng = seededRng(28);
  const loader = new Loader<BackendHandle>({
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
    models: [...models, spec],
    policy: { limitPerNode: perNode },
  });
  registry.attach(loader, () => false);
  placement.attach(loader);
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(4, "0")}`;
    registry.register({ nodeId, address: `10.0.${String(n >> 8)}.${String(n & 255)}:7000`, labels: {}, gpus: [], bootEpoch: 1n });
    for (let i = 0; i < perNode; i++) loader.adoptRemoteOnly(models[i] ?? spec, nodeId, `10.0.${String(n >> 8)}.${String(n & 255)}:${String(5000 + i)}`, `inc-${String(n)}-${String(i)}`);
  }
  return { loader, registry, placement, spec };
}

describe("ExplainPlacement over gRPC stops with its caller", () => {
  it("a cancelled call stops computing on the server (no node summarised after it ends); a call that stays reads every node", async () => {
    const { loader, registry, placement, spec } = cluster();
    const summaries = vi.spyOn(loader.core, "placementSummary");
    // Slices of 0 ms: the call yields between every two nodes, so the cancel is read as soon as it arrives.
    // What ExplainPlacement reads of the AdminService's dependencies (no hub, settings or HA here).
    const deps = { clock: new ManualClock(1_000), loader, nodes: registry, placement, explainSliceMs: 0 } as unknown as AdminDeps;
    const impl = adminService(deps);
    const handled: Promise<unknown>[] = [];
    const server = new GrpcServer();
    server.add(AdminService, {
      ...impl,
      explainPlacement(req: ExplainPlacementRequest, ctx: HandlerContext) {
        const p = impl.explainPlacement(req, ctx);
        handled.push(p.then(() => "answered", (e: unknown) => e));
        return p;
      },
    });
    const { address } = await server.listen("127.0.0.1:0");
    const client = createClient(AdminService, address);
    try {
      // A caller that stays: every node is explained (a page of all of them) and summarised once.
      const full = await client.explainPlacement({ model: spec.id, pageSize: nodeCount }, { timeoutMs: 120_000 });
      expect(full.nodes).toHaveLength(nodeCount);
      expect(full.nodes.every((n) => n.wouldEvict.length === 1)).toBe(true);
      expect(summaries.mock.calls.length).toBe(nodeCount);
      expect(await handled[0]).toBe("answered");

      // A caller that cancels once the server has started on the nodes.
      summaries.mockClear();
      const ctl = new AbortController();
      const call = client.explainPlacement({ model: spec.id }, { timeoutMs: 120_000, signal: ctl.signal }).then(() => "answered", (e: unknown) => e);
      while (summaries.mock.calls.length === 0) await macrotask();
      ctl.abort();
      expect(isWardenError(await call, Code.Canceled), String(await call)).toBe(true);
      while (handled.length < 2) await macrotask();
      const outcome = await handled[1];
      expect(isWardenError(outcome, Code.Canceled), String(outcome)).toBe(true);
      const atEnd = summaries.mock.calls.length;
      expect(atEnd).toBeLessThan(nodeCount);
      for (let i = 0; i < 50; i++) await macrotask();
      expect(summaries.mock.calls.length).toBe(atEnd);
    } finally {
      client.close();
      await server.shutdown(1_000);
      registry.close();
    }
  }, 120_000);
});
