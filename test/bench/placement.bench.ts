/**
 * Placement and heartbeat handling at cluster scale, each against a naive
 * baseline in the same run:
 *
 * (a) One placement decision plus its eviction plan with 10 000 ready
 *     instances on 1 000 nodes (10 each, limit 10 per node, so every decision
 *     must plan an eviction). p50 and p99 per decision:
 *     - "shipped": the coordinator's own `PlacementView.choose` over a real
 *       `NodeRegistry` and a real `Loader`/`WatchdogCore`, then the watchdog's
 *       admission on the chosen node (the victims);
 *     - checked first: the same node as `planPlacement` over candidates
 *       derived in one pass from the watchdog snapshot (same rules);
 *     - baseline: gather every instance of the cluster into one array and
 *       fully sort it (node free memory, then last used) for each decision,
 *       then walk it for the first eligible node and its victims.
 * (b) Heartbeat handling for 200 nodes at 1 Hz (10 inventory entries and
 *     resources each): decoding the HeartbeatRequest bytes plus
 *     `NodeRegistry.heartbeat` (reconciliation with a real Loader) against
 *     decoding alone, as a share of one core (CPU seconds per simulated second).
 * (c) One node's inventory reconcile with 1 000 held instances on 50 nodes:
 *     `reconcileInventory` over the loader's per-node indexes against the same
 *     rules walking every held instance and leftover (the code before them).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ManualClock, createUlidFactory, nullLogger, seededRng } from "@warden/common";
import type { Client } from "@warden/grpc";
import { Loader, modelSpec, type BackendHandle, type ModelSpec } from "@warden/loader";
import { reconcileInventory } from "@warden/cluster";
import { planPlacement, type NodeCandidate } from "@warden/placement";
import { BackendState, HeartbeatRequestSchema, type AgentService, type HeartbeatRequest } from "@warden/proto";
import type { WatchdogSnapshot } from "@warden/watchdog";
import { NodeRegistry } from "../../services/coordinator/src/nodes/node-registry.js";
import { PlacementView } from "../../services/coordinator/src/admin/placement-view.js";
import { median, type BenchResult } from "./bench-result.js";

const GiB = 1024 ** 3;
const now = (): number => performance.now();

// ------------------------------------------------------------------ fakes (nothing goes over the network)

/** An AgentService client whose WatchBackends yields nothing until aborted; no other method is called here. */
function stubClient(): Client<typeof AgentService> {
  const stub = {
    watchBackends(_req: unknown, opts?: { signal?: AbortSignal }): AsyncIterable<never> {
      const signal = opts?.signal;
      return {
        [Symbol.asyncIterator]: () => ({
          next: () =>
            new Promise<IteratorResult<never>>((resolve) => {
              const done = (): void => {
                resolve({ done: true, value: undefined });
              };
              if (signal === undefined || signal.aborted) done();
              else signal.addEventListener("abort", done, { once: true });
            }),
        }),
      };
    },
    close(): void {},
  };
  return stub as unknown as Client<typeof AgentService>;
}

function unusedPort(): never {
  throw new Error("bench: no agent or backend is contacted");
}

function newLoader(clock: ManualClock, nodes: NodeRegistry, placement: PlacementView, models: readonly ModelSpec[], limitPerNode: number): Loader {
  const rng = seededRng(42);
  return new Loader<BackendHandle>({
    clock,
    rng,
    sleep: async () => {},
    agents: nodes,
    backends: { connect: unusedPort },
    journal: { recordStopIntent: async () => {}, clearStopIntent: async () => {} },
    events: { emit: () => {}, emitDurable: async () => {} },
    placement,
    inventories: nodes,
    mintIncarnation: createUlidFactory(clock, rng),
    models,
    policy: { limitPerNode },
  });
}

function newRegistry(clock: ManualClock): NodeRegistry {
  return new NodeRegistry({ clock, log: nullLogger, graceMs: 5_000, connect: () => stubClient(), onNodeEvent: () => {} });
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

function timeEach(count: number, fn: (i: number) => void): { p50: number; p99: number } {
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const t = now();
    fn(i);
    out.push(now() - t);
  }
  out.sort((a, b) => a - b);
  return { p50: median(out), p99: percentile(out, 99) };
}

// ------------------------------------------------------------------ (a) placement + eviction planning

const zones = ["z0", "z1", "z2", "z3"] as const;

/** PlacementView's rules, in one pass over the snapshot instead of one pass per node. */
function candidatesOnePass(nodes: NodeRegistry, snap: WatchdogSnapshot, spec: ModelSpec): NodeCandidate[] {
  const policy = snap.policy;
  const perNode = new Map<string, { reserved: number; evBytes: number; evSlots: number; ev: string[]; block: string[] }>();
  const acc = (id: string): { reserved: number; evBytes: number; evSlots: number; ev: string[]; block: string[] } => {
    let a = perNode.get(id);
    if (a === undefined) {
      a = { reserved: 0, evBytes: 0, evSlots: 0, ev: [], block: [] };
      perNode.set(id, a);
    }
    return a;
  };
  for (const v of snap.instances) {
    const a = acc(v.nodeId);
    a.reserved += v.sizeBytes;
    const evictable = v.state === "ready" && v.pendingEviction === undefined && !v.pinned && (v.inFlight === 0 || policy.forceEvictionWhenBusy);
    if (evictable) {
      a.evBytes += v.sizeBytes;
      a.evSlots++;
    }
    if (v.model !== spec.id && v.groups.some((g) => spec.groups.includes(g))) (evictable ? a.ev : a.block).push(v.model);
  }
  const views = new Map(snap.nodes.map((v) => [v.nodeId, v]));
  for (const v of snap.nodes) {
    for (const e of v.occupancyEntries) {
      const a = acc(v.nodeId);
      a.reserved += e.sizeBytes;
      if (e.groups.some((g) => spec.groups.includes(g))) a.block.push(`${e.kind} ${e.model ?? e.key}`);
    }
  }
  return nodes.list().map((n): NodeCandidate => {
    let total = 0;
    let used = 0;
    for (const g of n.resources?.gpus ?? []) {
      total += Number(g.totalBytes);
      used += Number(g.usedBytes);
    }
    const a = perNode.get(n.nodeId);
    return {
      nodeId: n.nodeId,
      state: n.state,
      draining: n.draining,
      labels: n.labels,
      memoryTotalBytes: total,
      memoryUsedBytes: used,
      reservedBytes: a?.reserved ?? 0,
      occupied: views.get(n.nodeId)?.occupancy.total ?? 0,
      limit: policy.limitPerNode,
      evictableConflicts: a?.ev ?? [],
      blockingConflicts: a?.block ?? [],
      evictableBytes: a?.evBytes ?? 0,
      evictableSlots: a?.evSlots ?? 0,
      // The baseline's models have one replica at most: no replica rule applies.
      modelReplicas: 0,
      maxReplicasPerModel: 1,
      devices: 1,
      devicesWithReplica: 0,
    };
  });
}

interface NaiveInstance {
  incarnation: string;
  nodeId: string;
  model: string;
  lastUsed: number;
  sizeBytes: number;
  pinned: boolean;
}
interface NaiveNode {
  nodeId: string;
  labels: Record<string, string>;
  totalBytes: number;
  usedBytes: number;
  ready: boolean;
  draining: boolean;
  instances: NaiveInstance[];
}

/**
 * The naive decision: every instance of the cluster in one array, fully
 * sorted by its node's free memory (binpack: least first), then last used;
 * the first instance on an eligible node picks the node, and that node's
 * instances in sorted order give the victims (one slot needed).
 */
function naiveDecision(cluster: readonly NaiveNode[], spec: ModelSpec, limit: number): { nodeId: string; victims: string[] } | undefined {
  const all: { i: NaiveInstance; n: NaiveNode; free: number }[] = [];
  for (const n of cluster) for (const i of n.instances) all.push({ i, n, free: n.totalBytes - n.usedBytes });
  all.sort((a, b) => a.free - b.free || a.i.lastUsed - b.i.lastUsed);
  for (const c of all) {
    const n = c.n;
    if (!n.ready || n.draining) continue;
    if (!Object.entries(spec.selector).every(([k, v]) => n.labels[k] === v)) continue;
    const reserved = n.instances.reduce((s, x) => s + x.sizeBytes, 0);
    const evictable = n.instances.filter((x) => !x.pinned);
    const evBytes = evictable.reduce((s, x) => s + x.sizeBytes, 0);
    const free = n.totalBytes - Math.max(n.usedBytes, reserved);
    if (spec.sizeBytes > free + evBytes) continue;
    const need = n.instances.length + 1 - limit;
    if (need > evictable.length) continue;
    const victims = all.filter((x) => x.n === n && !x.i.pinned).slice(0, Math.max(0, need)).map((x) => x.i.incarnation);
    return { nodeId: n.nodeId, victims };
  }
  return undefined;
}

function placementBench(): BenchResult[] {
  const nodeCount = 1_000;
  const perNode = 10;
  const clock = new ManualClock(1_000);
  const registry = newRegistry(clock);
  const view = new PlacementView(registry, "binpack");
  const models: ModelSpec[] = [];
  for (let i = 0; i < perNode; i++) models.push(modelSpec({ id: `m${String(i)}`, backend: "b", sizeBytes: 2 * GiB, groups: i % 3 === 0 ? ["g"] : [] }));
  const incoming = zones.map((z) => modelSpec({ id: `incoming-${z}`, backend: "b", sizeBytes: 4 * GiB, selector: { zone: z }, groups: ["g"] }));
  const loader = newLoader(clock, registry, view, [...models, ...incoming], perNode);
  registry.attach(loader, () => false);
  view.attach(loader);
  const cluster: NaiveNode[] = [];
  const rng = seededRng(7);
  let t = 0;
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(4, "0")}`;
    const labels = { zone: zones[n % zones.length] ?? "z0", node: nodeId };
    const totalBytes = 80 * GiB;
    const usedBytes = Math.floor(rng.next() * 20) * GiB + 10 * GiB;
    registry.register({ nodeId, address: `10.0.${String(n >> 8)}.${String(n & 255)}:7000`, labels, gpus: [], bootEpoch: 1n });
    const rec = registry.get(nodeId);
    if (rec === undefined) throw new Error("registration failed");
    rec.resources = { $typeName: "warden.v1.NodeResources", gpus: [{ $typeName: "warden.v1.GpuInfo", index: 0, name: "fake", totalBytes: BigInt(totalBytes), usedBytes: BigInt(usedBytes) }], ramTotalBytes: 0n, ramUsedBytes: 0n };
    const nn: NaiveNode = { nodeId, labels, totalBytes, usedBytes, ready: true, draining: false, instances: [] };
    for (let i = 0; i < perNode; i++) {
      const spec = models[i];
      if (spec === undefined) throw new Error("model missing");
      const incarnation = `inc-${String(n)}-${String(i)}`;
      const address = `10.0.${String(n >> 8)}.${String(n & 255)}:${String(5000 + i)}`;
      loader.adoptRemoteOnly(spec, nodeId, address, incarnation);
      clock.advance(1);
      loader.core.updateLastUsed(address);
      nn.instances.push({ incarnation, nodeId, model: spec.id, lastUsed: ++t, sizeBytes: spec.sizeBytes, pinned: false });
    }
    cluster.push(nn);
  }
  const spec = (i: number): ModelSpec => incoming[i % incoming.length] ?? modelSpec({ id: "x", backend: "b" });

  // The eviction plan on the chosen node: the watchdog's admission (victims),
  // then the victim put back (stop failed, loader holds it) so every decision is the same work.
  let admitted = 0;
  const evictionPlan = (nodeId: string, s: ModelSpec): void => {
    const d = loader.core.admit({ nodeId, model: s.id, incarnation: `bench-${String(admitted++)}`, groups: s.groups, sizeBytes: s.sizeBytes });
    if (d.t !== "wait" || d.stops.length === 0) throw new Error(`unexpected admission ${d.t}`);
    for (const st of d.stops) loader.core.settle(st.incarnation, { t: "failed", message: "bench", freed: false });
  };
  const shipped = (i: number): void => {
    const s = spec(i);
    const c = view.choose(s);
    if (c.nodeId === undefined) throw new Error(`no node: ${c.reason}`);
    evictionPlan(c.nodeId, s);
  };
  const naive = (i: number): void => {
    if (naiveDecision(cluster, spec(i), perNode) === undefined) throw new Error("baseline found no node");
  };
  // Same node both ways (sanity: the planner and the shipped path agree).
  for (let i = 0; i < zones.length; i++) {
    const a = view.choose(spec(i)).nodeId;
    const b = planPlacement({ model: spec(i).id, sizeBytes: spec(i).sizeBytes, selector: spec(i).selector }, candidatesOnePass(registry, loader.core.snapshot(), spec(i)), "binpack");
    if (b.t === "no-fit" || a !== b.nodeId) throw new Error(`shipped chose ${String(a)}, planner ${b.t === "no-fit" ? "no-fit" : b.nodeId}`);
  }
  timeEach(200, shipped);
  timeEach(50, naive);
  const s = timeEach(3_000, shipped);
  const b = timeEach(500, naive);
  registry.close();
  const label = "1,000 nodes × 10 instances";
  const base = "naive: all instances in one array, full sort per decision";
  return [
    { name: `placement+eviction plan p50, PlacementView.choose as shipped (${label})`, baseline: base, ours: s.p50, baselineValue: b.p50, unit: "ms", higherIsBetter: false },
    { name: `placement+eviction plan p99, PlacementView.choose as shipped (${label})`, baseline: base, ours: s.p99, baselineValue: b.p99, unit: "ms", higherIsBetter: false },
  ];
}

// ------------------------------------------------------------------ (b) heartbeat handling

function heartbeatBench(): BenchResult[] {
  const nodeCount = 200;
  const perNode = 10;
  const clock = new ManualClock(1_000);
  const registry = newRegistry(clock);
  const view = new PlacementView(registry, "binpack");
  const models: ModelSpec[] = [];
  for (let i = 0; i < perNode; i++) models.push(modelSpec({ id: `m${String(i)}`, backend: "b", sizeBytes: 2 * GiB, groups: i % 3 === 0 ? ["g"] : [] }));
  const loader = newLoader(clock, registry, view, models, 0);
  registry.attach(loader, () => false);
  view.attach(loader);
  const ulid = createUlidFactory(clock, seededRng(3));
  // One encoded heartbeat per node per sequence number is built lazily below; the inventory is fixed.
  const inventories: HeartbeatRequest["backends"][] = [];
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(3, "0")}`;
    registry.register({ nodeId, address: `10.1.0.${String(n)}:7000`, labels: { node: nodeId }, gpus: [], bootEpoch: 1n });
    const inv: HeartbeatRequest["backends"] = [];
    for (let i = 0; i < perNode; i++) {
      inv.push({
        $typeName: "warden.v1.InventoryEntry",
        incarnation: ulid(),
        model: `m${String(i)}`,
        address: `10.1.0.${String(n)}:${String(5000 + i)}`,
        pid: 10_000 + n * perNode + i,
        state: BackendState.READY,
        memoryBytes: BigInt(2 * GiB),
        gpuDevice: String(i % 2),
        backend: "b",
        loadDigest: "",
        bundleDigest: "",
      });
    }
    inventories.push(inv);
  }
  const encode = (n: number, seq: number): Uint8Array =>
    toBinary(
      HeartbeatRequestSchema,
      create(HeartbeatRequestSchema, {
        nodeId: `node-${String(n).padStart(3, "0")}`,
        bootEpoch: 1n,
        sequence: BigInt(seq),
        backends: inventories[n],
        orphans: [],
        resources: {
          gpus: [0, 1].map((g) => ({ index: g, name: "fake", totalBytes: BigInt(80 * GiB), usedBytes: BigInt((20 + ((seq + n + g) % 7)) * GiB) })),
          ramTotalBytes: BigInt(512 * GiB),
          ramUsedBytes: BigInt(64 * GiB),
        },
      }),
    );
  // Pre-encode a window of sequences per node (the bytes differ per second: sequence and memory readings).
  const window = 7;
  const bytes: Uint8Array[][] = [];
  for (let s = 0; s < window; s++) bytes.push(Array.from({ length: nodeCount }, (_, n) => encode(n, s + 1)));
  let seq = 0;
  const handleSecond = (): void => {
    seq++;
    const row = bytes[seq % window] ?? [];
    for (let n = 0; n < nodeCount; n++) {
      const req = fromBinary(HeartbeatRequestSchema, row[n] ?? new Uint8Array());
      req.sequence = BigInt(seq);
      if (!registry.heartbeat({ nodeId: req.nodeId, bootEpoch: req.bootEpoch, sequence: req.sequence, backends: req.backends, orphans: req.orphans, resources: req.resources })) throw new Error("heartbeat refused");
    }
    clock.advance(1_000);
  };
  let sink = 0;
  const decodeSecond = (): void => {
    seq++;
    const row = bytes[seq % window] ?? [];
    for (let n = 0; n < nodeCount; n++) sink += fromBinary(HeartbeatRequestSchema, row[n] ?? new Uint8Array()).backends.length;
  };
  // First second adopts every instance (remote-only); steady state afterwards.
  handleSecond();
  if (loader.heldInstances().length !== nodeCount * perNode) throw new Error(`adopted ${String(loader.heldInstances().length)} instances`);
  const cpuPerSecond = (fn: () => void, seconds: number): number => {
    const start = process.cpuUsage();
    for (let i = 0; i < seconds; i++) fn();
    const d = process.cpuUsage(start);
    return (d.user + d.system) / 1e6 / seconds;
  };
  cpuPerSecond(handleSecond, 20);
  cpuPerSecond(decodeSecond, 20);
  const ours: number[] = [];
  const base: number[] = [];
  for (let r = 0; r < 3; r++) {
    ours.push(cpuPerSecond(handleSecond, 60));
    base.push(cpuPerSecond(decodeSecond, 60));
  }
  if (sink === 0) throw new Error("nothing decoded");
  registry.close();
  return [
    {
      name: "heartbeat handling, 200 nodes at 1 Hz, 10 entries each (decode + NodeRegistry.heartbeat), share of one core",
      baseline: "decoding the HeartbeatRequest bytes only",
      ours: median(ours) * 100,
      baselineValue: median(base) * 100,
      unit: "% core",
      higherIsBetter: false,
    },
  ];
}

// ------------------------------------------------------------------ (c) one heartbeat's reconcile: per-node index vs full scan

/**
 * The reconcile before the loader's per-node index (same rules): after the
 * inventory's own entries, every held instance and every leftover of the
 * cluster is walked and filtered by node.
 */
function reconcileByFullScan(loader: Loader, nodeId: string, inventory: HeartbeatRequest["backends"], missing: Map<string, number>): number {
  const seen = new Set<string>();
  for (const e of inventory) {
    seen.add(e.incarnation);
    if (loader.knows(e.incarnation)) continue;
  }
  let checked = 0;
  for (const h of loader.heldInstances()) {
    if (h.nodeId !== nodeId || h.phase !== "ready") continue;
    checked++;
    if (!seen.has(h.incarnation)) missing.set(h.incarnation, (missing.get(h.incarnation) ?? 0) + 1);
    else missing.delete(h.incarnation);
  }
  for (const l of loader.leftoverList()) {
    if (l.nodeId !== nodeId) continue;
    checked++;
    if (!seen.has(l.incarnation)) missing.set(l.incarnation, (missing.get(l.incarnation) ?? 0) + 1);
  }
  return checked;
}

export function reconcileBench(): BenchResult[] {
  const nodeCount = 50;
  const perNode = 20;
  const clock = new ManualClock(1_000);
  const registry = newRegistry(clock);
  const view = new PlacementView(registry, "binpack");
  const models: ModelSpec[] = [];
  for (let i = 0; i < perNode; i++) models.push(modelSpec({ id: `m${String(i)}`, backend: "b", sizeBytes: GiB }));
  const loader = newLoader(clock, registry, view, models, 0);
  registry.attach(loader, () => false);
  view.attach(loader);
  const ulid = createUlidFactory(clock, seededRng(5));
  const inventories: HeartbeatRequest["backends"][] = [];
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(2, "0")}`;
    registry.register({ nodeId, address: `10.2.0.${String(n)}:7000`, labels: {}, gpus: [], bootEpoch: 1n });
    const inv: HeartbeatRequest["backends"] = [];
    for (let i = 0; i < perNode; i++) {
      inv.push({ $typeName: "warden.v1.InventoryEntry", incarnation: ulid(), model: `m${String(i)}`, address: `10.2.0.${String(n)}:${String(5000 + i)}`, pid: 20_000 + n * perNode + i, state: BackendState.READY, memoryBytes: BigInt(GiB), gpuDevice: "0", backend: "b", loadDigest: "", bundleDigest: "" });
    }
    inventories.push(inv);
    if (!registry.heartbeat({ nodeId, bootEpoch: 1n, sequence: 1n, backends: inv, orphans: [], resources: undefined })) throw new Error("heartbeat refused");
  }
  if (loader.heldInstances().length !== nodeCount * perNode) throw new Error(`adopted ${String(loader.heldInstances().length)} instances`);
  const missing = Array.from({ length: nodeCount }, () => new Map<string, number>());
  let k = 0;
  let sink = 0;
  const ours = (): void => {
    const n = k++ % nodeCount;
    sink += reconcileInventory(loader, { nodeId: `node-${String(n).padStart(2, "0")}`, inventory: inventories[n] ?? [], missing: missing[n] ?? new Map<string, number>(), openIntent: () => false }).size;
  };
  const scan = (): void => {
    const n = k++ % nodeCount;
    sink += reconcileByFullScan(loader, `node-${String(n).padStart(2, "0")}`, inventories[n] ?? [], missing[n] ?? new Map<string, number>());
  };
  const microsPer = (fn: () => void, count: number): number => {
    const start = now();
    for (let i = 0; i < count; i++) fn();
    return ((now() - start) * 1000) / count;
  };
  microsPer(ours, 2_000);
  microsPer(scan, 2_000);
  const o: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < 5; r++) {
    o.push(microsPer(ours, 5_000));
    b.push(microsPer(scan, 5_000));
  }
  if (sink === 0) throw new Error("nothing reconciled");
  registry.close();
  return [
    {
      name: "one heartbeat's inventory reconcile, 1,000 instances on 50 nodes (20 each)",
      baseline: "the same reconcile walking every held instance and leftover, filtered by node",
      ours: median(o),
      baselineValue: median(b),
      unit: "µs/heartbeat",
      higherIsBetter: false,
    },
  ];
}

export async function run(): Promise<BenchResult[]> {
  const results = placementBench();
  await Promise.resolve();
  results.push(...heartbeatBench());
  await Promise.resolve();
  results.push(...reconcileBench());
  return results;
}
