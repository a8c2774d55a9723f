/**
 * The coordinator's work per heartbeat, in process, with delta heartbeats
 * against every inventory whole, in the same run: 200 nodes (`--nodes N`) × 10 READY
 * backends at 1 Hz, each heartbeat decoded from its bytes, validated
 * (validateHeartbeat) and handled by `NodeRegistry.receive` with a real
 * Loader (reconciliation included). Deltas are the steady state: empty (the
 * node's backends did not change) with the digest of the whole inventory.
 * Three kinds in the same run: every inventory whole; empty deltas each
 * reconciled whole (`skipUnchangedReconcile: false`, as before the skip);
 * empty deltas on settled nodes, which skip the reconcile (the default).
 * CPU time (process.cpuUsage) per heartbeat, median of 3 interleaved rounds
 * of 60 simulated seconds each. The whole-process figures (gRPC, HTTP/2, GC)
 * are the swarm benchmark's (test/bench/swarm.md).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ManualClock, createUlidFactory, nullLogger, seededRng } from "@warden/common";
import type { Client } from "@warden/grpc";
import { Loader, modelSpec, type BackendHandle, type ModelSpec } from "@warden/loader";
import { BackendState, HeartbeatRequestSchema, inventoryDigest, type AgentService, type HeartbeatRequest, type InventoryEntry } from "@warden/proto";
import { NodeRegistry } from "../../services/coordinator/src/nodes/node-registry.js";
import { validateHeartbeat } from "../../services/coordinator/src/nodes/node-report-limits.js";
import { PlacementView } from "../../services/coordinator/src/admin/placement-view.js";
import { median, type BenchResult } from "./bench-result.js";

const GiB = 1024 ** 3;
const nodesAt = process.argv.indexOf("--nodes");
const nodeCount = nodesAt < 0 ? 200 : Number(process.argv[nodesAt + 1]);
if (!Number.isInteger(nodeCount) || nodeCount < 1 || nodeCount > 4096) throw new RangeError("--nodes: an integer from 1 to 4096");
const perNode = 10;

function stubClient(): Client<typeof AgentService> {
  const stub = {
    watchBackends: (_req: unknown, opts?: { signal?: AbortSignal }): AsyncIterable<never> => ({
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
    }),
    close(): void {},
  };
  return stub as unknown as Client<typeof AgentService>;
}

/** One coordinator's node table and loader, its nodes registered, and a function handling one second of heartbeats. */
function cluster(deltas: boolean, skipUnchanged = true): { second: () => void; close: () => void } {
  const clock = new ManualClock(1_000);
  const registry = new NodeRegistry({ clock, log: nullLogger, graceMs: 5_000, connect: () => stubClient(), onNodeEvent: () => {}, skipUnchangedReconcile: skipUnchanged });
  const view = new PlacementView(registry, "binpack");
  const models: ModelSpec[] = Array.from({ length: perNode }, (_, i) => modelSpec({ id: `m${String(i)}`, backend: "b", sizeBytes: 2 * GiB }));
  const rng = seededRng(42);
  const loader = new Loader<BackendHandle>({
    clock,
    rng,
    sleep: async () => {},
    agents: registry,
    backends: { connect: () => { throw new Error("not used"); } },
    journal: { recordStopIntent: async () => {}, clearStopIntent: async () => {} },
    events: { emit: () => {}, emitDurable: async () => {} },
    placement: view,
    inventories: registry,
    mintIncarnation: createUlidFactory(clock, rng),
    models,
    policy: { limitPerNode: 0 },
  });
  registry.attach(loader, () => false);
  view.attach(loader);
  const ulid = createUlidFactory(clock, seededRng(3));
  const inventories: InventoryEntry[][] = [];
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(4, "0")}`;
    registry.register({ nodeId, address: `10.1.${String(n >> 8)}.${String(n & 255)}:7000`, labels: { node: nodeId }, gpus: [], bootEpoch: 1n });
    inventories.push(Array.from({ length: perNode }, (_, i) => create(HeartbeatRequestSchema, { backends: [{ incarnation: ulid(), model: `m${String(i)}`, address: `10.1.${String(n >> 8)}.${String(n & 255)}:${String(5000 + i)}`, pid: 10_000 + n * perNode + i, state: BackendState.READY, memoryBytes: BigInt(2 * GiB), gpuDevice: String(i % 2), backend: "b" }] }).backends[0] as InventoryEntry));
  }
  const encode = (n: number, full: boolean): Uint8Array => {
    const inv = inventories[n] ?? [];
    return toBinary(
      HeartbeatRequestSchema,
      create(HeartbeatRequestSchema, {
        nodeId: `node-${String(n).padStart(4, "0")}`,
        bootEpoch: 1n,
        sequence: 2n,
        ...(full ? { backends: inv } : { delta: { baseSequence: 1n, upserts: [], removed: [], digest: inventoryDigest(inv) } }),
        resources: { gpus: [0, 1].map((g) => ({ index: g, name: "fake", totalBytes: BigInt(80 * GiB), usedBytes: BigInt((20 + ((n + g) % 7)) * GiB) })), ramTotalBytes: BigInt(512 * GiB), ramUsedBytes: BigInt(64 * GiB) },
      }),
    );
  };
  const fullBytes = Array.from({ length: nodeCount }, (_, n) => encode(n, true));
  const steadyBytes = deltas ? Array.from({ length: nodeCount }, (_, n) => encode(n, false)) : fullBytes;
  let seq = 0n;
  const handle = (req: HeartbeatRequest): void => {
    validateHeartbeat(req);
    const d = req.delta;
    const answer = registry.receive({ nodeId: req.nodeId, bootEpoch: req.bootEpoch, sequence: req.sequence, backends: req.backends, ...(d === undefined ? {} : { delta: { baseSequence: d.baseSequence, upserts: d.upserts, removed: d.removed, digest: d.digest } }), orphans: req.orphans, foreign: req.foreign, resources: req.resources });
    if (answer !== "ok") throw new Error(`heartbeat answered ${answer}`);
  };
  const second = (bytes: readonly Uint8Array[]): void => {
    seq++;
    for (let n = 0; n < nodeCount; n++) {
      const req = fromBinary(HeartbeatRequestSchema, bytes[n] ?? new Uint8Array());
      req.sequence = seq;
      if (req.delta !== undefined) req.delta.baseSequence = seq - 1n;
      handle(req);
    }
    clock.advance(1_000);
  };
  // The first second is full either way (and adopts every instance).
  second(fullBytes);
  if (loader.heldInstances().length !== nodeCount * perNode) throw new Error(`adopted ${String(loader.heldInstances().length)} instances`);
  return { second: () => { second(steadyBytes); }, close: () => { registry.close(); } };
}

function cpuPerHeartbeatUs(second: () => void, seconds: number): number {
  const start = process.cpuUsage();
  for (let i = 0; i < seconds; i++) second();
  const d = process.cpuUsage(start);
  return (d.user + d.system) / (seconds * nodeCount);
}

export async function run(): Promise<BenchResult[]> {
  const full = cluster(false);
  const reconciled = cluster(true, false);
  const delta = cluster(true);
  cpuPerHeartbeatUs(full.second, 20);
  cpuPerHeartbeatUs(reconciled.second, 20);
  cpuPerHeartbeatUs(delta.second, 20);
  const ours: number[] = [];
  const base: number[] = [];
  const whole: number[] = [];
  for (let r = 0; r < 3; r++) {
    base.push(cpuPerHeartbeatUs(full.second, 60));
    whole.push(cpuPerHeartbeatUs(reconciled.second, 60));
    ours.push(cpuPerHeartbeatUs(delta.second, 60));
  }
  full.close();
  reconciled.close();
  delta.close();
  await Promise.resolve();
  const name = `heartbeat handling in process, ${String(nodeCount)} nodes × ${String(perNode)} backends, steady state: decode + validate + NodeRegistry.receive of an empty delta`;
  return [
    { name, baseline: "the same with every inventory whole", ours: median(ours), baselineValue: median(base), unit: "µs CPU/heartbeat", higherIsBetter: false },
    { name: `${name} (skipping the reconcile on a settled node)`, baseline: "the same empty delta reconciled whole (skipUnchangedReconcile: false)", ours: median(ours), baselineValue: median(whole), unit: "µs CPU/heartbeat", higherIsBetter: false },
  ];
}
