/**
 * Many nodes, cheaply, for the listing tests: one in-process AgentService
 * (the address every simulated node registers with, so the coordinator's
 * dials and WatchBackends succeed as against real agents) and NodeService
 * calls shaped as the real agent's (Register, then a heartbeat carrying its
 * inventory of READY backends, which the coordinator adopts as instances).
 * The nodes beat only when told to, so their health is the test's to set.
 */
import { once } from "node:events";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, createUlidFactory, cryptoRng, systemClock, wardenVersion } from "@warden/common";
import { GrpcServer, createClient, type Client } from "@warden/grpc";
import { AgentService, BackendState, HeartbeatRequestSchema, NodeService, type InventoryEntry } from "@warden/proto";

const gib = 1024n ** 3n;
const callTimeoutMs = 30_000;

export interface ListingNode {
  readonly nodeId: string;
  readonly bootEpoch: bigint;
  sequence: bigint;
  readonly backends: InventoryEntry[];
}

export interface ListingSwarm {
  /** Registers the node and sends its first heartbeat (its instances are adopted then). */
  add(nodeId: string, models: readonly string[]): Promise<ListingNode>;
  /** Another heartbeat with the same inventory (the node is ready again). */
  beat(n: ListingNode): Promise<void>;
  close(): Promise<void>;
}

export async function startListingSwarm(coordinatorAddress: string): Promise<ListingSwarm> {
  const ulid = createUlidFactory(systemClock, cryptoRng);
  const stop = new AbortController();
  const unimplemented = (): never => {
    throw new WardenError(Code.Unimplemented, "not simulated");
  };
  const agentServer = new GrpcServer();
  agentServer.add(AgentService, {
    startBackend: () => unimplemented(),
    stopBackend: async () => ({ outcome: { case: "alreadyGone", value: {} } }),
    listBackends: async () => unimplemented(),
    getNodeStatus: async () => unimplemented(),
    stopOrphan: async () => unimplemented(),
    listBundles: async () => unimplemented(),
    installBundle: async () => unimplemented(),
    removeBundle: async () => unimplemented(),
    freeBackend: async () => ({ outcome: { case: "alreadyGone", value: {} } }),
    getBackendLogs: async () => unimplemented(),
    // Held open until the coordinator cancels it or the swarm closes (nothing exits here).
    watchBackends: (_req, ctx) => ({
      [Symbol.asyncIterator]: () => ({
        next: async (): Promise<IteratorResult<never>> => {
          if (!ctx.signal.aborted && !stop.signal.aborted) await Promise.race([once(ctx.signal, "abort"), once(stop.signal, "abort")]).catch(() => undefined);
          return { done: true, value: undefined };
        },
      }),
    }),
  });
  const { address: agentAddress } = await agentServer.listen("127.0.0.1:0");
  const client: Client<typeof NodeService> = createClient(NodeService, coordinatorAddress);
  let addrSeq = 0;
  const entry = (model: string): InventoryEntry => {
    const a = addrSeq++;
    return create(HeartbeatRequestSchema, {
      backends: [{ incarnation: ulid(), model, address: `10.9.${String((a >> 8) & 255)}.${String(a & 255)}:50051`, pid: 10_000 + a, state: BackendState.READY, memoryBytes: 2n * gib, gpuDevice: "0", startedAt: timestampFromMs(Date.now()), backend: "backend-sim" }],
    }).backends[0] as InventoryEntry;
  };
  const beat = async (n: ListingNode): Promise<void> => {
    n.sequence++;
    await client.heartbeat({ nodeId: n.nodeId, bootEpoch: n.bootEpoch, sequence: n.sequence, backends: n.backends, orphans: [], foreign: [], leaderEpoch: 0n }, { timeoutMs: callTimeoutMs });
  };
  return {
    async add(nodeId, models) {
      const n: ListingNode = { nodeId, bootEpoch: BigInt(Date.now()), sequence: 0n, backends: models.map(entry) };
      await client.register(
        { nodeId, address: agentAddress, labels: {}, gpus: [{ index: 0, name: "sim", totalBytes: 80n * gib, usedBytes: 0n }], bootEpoch: n.bootEpoch, ramTotalBytes: 256n * gib, version: wardenVersion, backends: ["backend-sim"], limits: {} },
        { timeoutMs: callTimeoutMs },
      );
      await beat(n);
      return n;
    },
    beat,
    async close() {
      stop.abort();
      client.close();
      await agentServer.shutdown(1_000);
    },
  };
}
