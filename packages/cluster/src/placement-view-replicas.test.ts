/**
 * PlacementView for replicas: the model's replicas counted per node
 * and per GPU from a real WatchdogCore (every state) and a real
 * LeftoverTracker, the reservation of a loading replica, and the node's
 * effective limits from a real NodeTable (agent limits, operator override).
 * Replicas are registered on the core directly (distinct incarnations), not
 * through the loader. Pure: no processes, no network.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { create } from "@bufbuild/protobuf";
import { ManualClock, seededRng } from "@warden/common";
import { LeftoverTracker, modelSpec, type AgentPort, type Loader, type ModelSpec } from "@warden/loader";
import { NodeResourcesSchema, type NodeResources } from "@warden/proto";
import { createWatchdogCore, type InstanceSpec, type WatchdogCore } from "@warden/watchdog";
import type { AgentConnector } from "./agent-connector.js";
import type { NodeLimits } from "./node-limits.js";
import { NodeTable } from "./node-table.js";
import { PlacementView, type PlacementNode, type PlacementNodes } from "./placement-view.js";

const GiB = 1024 ** 3;

function resources(gpuGiB: readonly number[]): NodeResources {
  return create(NodeResourcesSchema, { gpus: gpuGiB.map((t, index) => ({ index, name: "fake", totalBytes: BigInt(t * GiB), usedBytes: 0n })), ramTotalBytes: BigInt(64 * GiB), ramUsedBytes: 0n });
}

interface Cluster {
  readonly core: WatchdogCore;
  readonly leftovers: LeftoverTracker;
  readonly view: PlacementView;
  readonly elsewhere: Map<string, string[]>;
}

/** A real core and leftover tracker behind the view; `nodes` is the table (a real NodeTable, or records with limits). */
function cluster(nodes: PlacementNodes, strategy: "binpack" | "spread" = "binpack"): Cluster {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true } });
  const leftovers: LeftoverTracker = new LeftoverTracker({
    clock: new ManualClock(),
    rng: seededRng(1),
    // Never answers: the leftover stays for the test's length (no timer fires on a manual clock anyway).
    retry: () => new Promise(() => {}),
    onNodeChanged: (nodeId) => {
      core.setNodeOccupancy(nodeId, leftovers.occupancy(nodeId));
    },
    onRetried: () => {},
    onStuck: () => {},
    onReaped: () => {},
  });
  // Loads a node reports starting that the loader does not know (Loader.startingElsewhere): model → node ids.
  const elsewhere = new Map<string, string[]>();
  const loader = { core, getPolicy: () => core.getPolicy(), leftoverList: () => leftovers.list(), startingElsewhere: (model: string) => (elsewhere.get(model) ?? []).values(), journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] } } as unknown as Loader;
  const view = new PlacementView(nodes, strategy);
  view.attach(loader);
  return { core, leftovers, view, elsewhere };
}

/** Node records with per-node limits (the NodeTable's two methods placement reads). */
function records(init: readonly { nodeId: string; gpuGiB?: readonly number[]; limits?: NodeLimits }[]): PlacementNodes {
  const list: PlacementNode[] = init.map((n) => ({ nodeId: n.nodeId, state: "ready", draining: false, labels: {}, backends: new Set<string>(), resources: n.gpuGiB === undefined ? undefined : resources(n.gpuGiB) }));
  const limits = new Map(init.map((n) => [n.nodeId, n.limits ?? {}]));
  return { list: () => list, limitsOf: (id) => limits.get(id) ?? {} };
}

let seq = 0;
function replica(nodeId: string, model: string, extra: Partial<InstanceSpec> = {}): InstanceSpec {
  seq++;
  return { nodeId, model, incarnation: `inc-${String(seq)}`, address: `10.0.${String(seq)}.1:5000`, sizeBytes: GiB, ...extra };
}

const spec = (init: Partial<ModelSpec> = {}): ModelSpec => modelSpec({ id: "m", backend: "backend-sim", sizeBytes: GiB, ...init });
const reasons = (view: PlacementView, s: ModelSpec): Record<string, string> => Object.fromEntries(view.plan(s).verdicts.map((v) => [v.nodeId, v.reason]));

describe("PlacementView: replicas of one model", () => {
  it("counts the model's instances in every state per node: ready, loading, reserved and pending each rule the node out under spread node", () => {
    const limits = { maxReplicasPerModel: 8 };
    const { core, view } = cluster(records(["a", "b", "c", "d", "e"].map((nodeId) => ({ nodeId, limits }))));
    core.registerReady(replica("a", "m"));
    core.registerLoading(replica("b", "m"));
    expect(core.admit({ nodeId: "c", model: "m", incarnation: "reserved-c" }).t).toBe("admitted");
    const pending = replica("d", "m");
    core.registerReady(pending);
    expect(core.selectExplicit(pending.incarnation, { reason: "admin" }).t).toBe("stop");
    // Another model's instance does not count.
    core.registerReady(replica("e", "other"));
    const s = spec({ spread: "node" });
    expect(view.choose(s)).toEqual({ nodeId: "e" });
    const r = reasons(view, s);
    for (const n of ["a", "b", "c", "d"]) expect(r[n]).toBe("already holds a replica of m (spread: node)");
    expect(r["e"]).toMatch(/^fits/);
  });

  it("a leftover replica counts on its node (spread node, and the default maxReplicasPerModel 1)", () => {
    const { leftovers, view } = cluster(records([{ nodeId: "a", limits: { maxReplicasPerModel: 4 } }, { nodeId: "b" }]));
    leftovers.add({ incarnation: "left-a", nodeId: "a", model: "m", address: "10.9.0.1:5000", groups: [], sizeBytes: GiB, lastError: "stop failed" });
    leftovers.add({ incarnation: "left-b", nodeId: "b", model: "m", address: "10.9.0.2:5000", groups: [], sizeBytes: GiB, lastError: "stop failed" });
    expect(reasons(view, spec({ spread: "node" }))["a"]).toBe("already holds a replica of m (spread: node)");
    expect(reasons(view, spec({ spread: "any" }))["b"]).toBe("holds 1 replica(s) of m, its maxReplicasPerModel is 1");
    // Nothing is allowed: the load gets no node at all, never a fallback onto a ruled-out one.
    const none = view.choose(spec({ spread: "node" }));
    expect(none.nodeId).toBeUndefined();
    // Under any, "a" (maxReplicasPerModel 4) may take a second one next to its leftover.
    expect(view.choose(spec({ spread: "any" }))).toEqual({ nodeId: "a" });
  });

  it("a load its node reports starting that this coordinator does not know (a previous leader's) counts as a replica there (maxReplicasPerModel, spread node)", () => {
    // After a takeover the node reports the old leader's load of m still loading: reconciliation adopts only ready
    // instances and the journal may not name it; a second replica on that node would break its maxReplicasPerModel 1.
    const { view, elsewhere } = cluster(records([{ nodeId: "a" }, { nodeId: "b", limits: { maxReplicasPerModel: 4 } }]));
    elsewhere.set("m", ["a"]);
    expect(reasons(view, spec({ spread: "any" }))["a"]).toBe("holds 1 replica(s) of m, its maxReplicasPerModel is 1");
    expect(reasons(view, spec({ spread: "node" }))["b"]).toMatch(/^fits/);
    expect(view.choose(spec({ spread: "any" }))).toEqual({ nodeId: "b" });
    elsewhere.set("m", ["a", "b"]);
    expect(reasons(view, spec({ spread: "node" }))["b"]).toBe("already holds a replica of m (spread: node)");
    expect(view.choose(spec({ spread: "node" })).nodeId).toBeUndefined();
  });

  it("spread gpu counts devices by the instances' GPU index: two GPUs take two replicas, not three; no GPUs reported is one device", () => {
    const { core, view } = cluster(records([{ nodeId: "two", gpuGiB: [24, 24], limits: { maxReplicasPerModel: 4 } }, { nodeId: "ram", limits: { maxReplicasPerModel: 4 } }]));
    const s = spec({ spread: "gpu" });
    core.registerReady(replica("two", "m", { gpu: 0 }));
    core.registerReady(replica("ram", "m"));
    expect(reasons(view, s)["ram"]).toBe("every GPU device already holds a replica of m (spread: gpu; 1/1 devices)");
    expect(view.choose(s)).toEqual({ nodeId: "two" });
    core.registerLoading(replica("two", "m", { gpu: 1 }));
    expect(reasons(view, s)["two"]).toBe("every GPU device already holds a replica of m (spread: gpu; 2/2 devices)");
    expect(view.choose(s).nodeId).toBeUndefined();
  });

  it("a replica whose GPU index is unknown takes a device of its own", () => {
    const { core, view } = cluster(records([{ nodeId: "two", gpuGiB: [24, 24], limits: { maxReplicasPerModel: 4 } }]));
    core.registerReady(replica("two", "m", { gpu: 0 }));
    core.registerReady(replica("two", "m"));
    expect(view.plan(spec({ spread: "gpu" })).t).toBe("no-fit");
    expect(view.plan(spec({ spread: "any" })).t).toBe("place");
  });

  it("a loading replica holds its VRAM reservation: the next replica's placement sees it from admission until ready, and it is freed when the load fails", () => {
    const { core, view } = cluster(records([{ nodeId: "a", gpuGiB: [24], limits: { maxReplicasPerModel: 2 } }, { nodeId: "b", gpuGiB: [24], limits: { maxReplicasPerModel: 2 } }]));
    const s = spec({ sizeBytes: 16 * GiB });
    expect(core.admit({ nodeId: "a", model: "m", incarnation: "first", sizeBytes: 16 * GiB }).t).toBe("admitted");
    const onA = (): string | undefined => reasons(view, s)["a"];
    // Reserved (admitted, not spawned yet): 8 GiB left on "a".
    expect(onA()).toMatch(new RegExp(`needs ${String(16 * GiB)} bytes, ${String(8 * GiB)} bytes free`));
    expect(view.choose(s)).toEqual({ nodeId: "b" });
    core.registerLoading({ nodeId: "a", model: "m", incarnation: "first", address: "10.1.0.1:5000", sizeBytes: 16 * GiB, gpu: 0 });
    expect(onA()).toMatch(/needs .* bytes, 8589934592 bytes free/);
    expect(view.choose(s)).toEqual({ nodeId: "b" });
    // Failed load: removed through the watchdog, the reservation goes with it.
    core.remove("first");
    expect(onA()).toMatch(/^fits \(25769803776 bytes free/);
    // Loading then ready: still accounted (as ready now).
    core.registerLoading({ nodeId: "a", model: "m", incarnation: "second", address: "10.1.0.2:5000", sizeBytes: 16 * GiB, gpu: 0 });
    expect(core.markReady("second")).toBe("ready");
    expect(onA()).toMatch(/bytes, 8589934592 bytes free/);
  });

  it("reads the effective limits from the NodeTable: the agent's, then the operator's override over them, kept across a re-registration", () => {
    const port: AgentPort = {
      startBackend: () => {
        throw new Error("not used");
      },
      stopBackend: () => Promise.reject(new Error("not used")),
      freeBackend: () => Promise.reject(new Error("not used")),
      isRunning: () => Promise.reject(new Error("not used")),
    };
    const connector: AgentConnector<object> = { connect: () => ({}), agentPort: () => port, close: () => {}, stopOrphan: () => Promise.reject(new Error("not used")), watchExits: () => {} };
    const table = new NodeTable<object>({ clock: new ManualClock(), connector, graceMs: 5_000, lostAfterMs: 60_000, onNodeEvent: () => {} });
    table.register({ nodeId: "a", address: "10.0.0.1:7000", labels: {}, gpus: [], bootEpoch: 1n, limits: { maxReplicasPerModel: 1 } });
    const { core, view } = cluster(table);
    const s = spec({ spread: "any" });
    // Registered, no inventory yet: what runs there is unknown, so nothing is placed there — a wait, not a refusal.
    expect(view.plan(s)).toMatchObject({ t: "no-fit", reason: "no node fits: a: node has not reported its backends since it registered" });
    expect(view.choose(s)).toMatchObject({ nodeId: undefined, transient: true });
    const inventory = (bootEpoch: bigint): void => {
      table.heartbeat({ nodeId: "a", bootEpoch, sequence: 1n, backends: [], orphans: [], resources: undefined });
    };
    inventory(1n);
    core.registerReady(replica("a", "m"));
    expect(view.plan(s)).toMatchObject({ t: "no-fit", reason: "no node fits: a: holds 1 replica(s) of m, its maxReplicasPerModel is 1" });
    table.setLimitsOverride("a", { maxReplicasPerModel: 2 });
    expect(view.plan(s)).toMatchObject({ t: "place", nodeId: "a" });
    expect(view.plan(s).reason).toMatch(/holds 1 replica\(s\) of m already/);
    // The agent restarts with other limits: the override still wins.
    table.register({ nodeId: "a", address: "10.0.0.1:7000", labels: {}, gpus: [], bootEpoch: 2n, limits: { maxReplicasPerModel: 1, memoryBudget: { t: "bytes", bytes: 8 * GiB } } });
    inventory(2n);
    expect(view.choose(s)).toEqual({ nodeId: "a" });
    // A budget the accounted replica already fills (memory not reported yet: the budget alone caps).
    table.setLimitsOverride("a", { maxReplicasPerModel: 2, memoryBudget: { t: "bytes", bytes: GiB } });
    expect(view.plan(s).reason).toBe(`no node fits: a: over its memory budget ${String(GiB)} bytes: needs ${String(GiB)} bytes, 0 bytes free within it, eviction cannot make room`);
    expect(view.choose(s).nodeId).toBeUndefined();
  });
});

type Kind = "ready" | "loading" | "reserved" | "pending" | "leftover";
interface GenNode {
  readonly gpus: number;
  readonly max: number;
  readonly replicas: readonly { readonly kind: Kind; readonly gpu: number | undefined }[];
}

describe("PlacementView: spread and maxReplicasPerModel (property)", () => {
  it("on random clusters, the node a load takes never violates spread node/gpu nor the node's maxReplicasPerModel", () => {
    const seen = { chosen: 0, ruledOut: 0, fallbackToHolder: 0 };
    const nodeArb: fc.Arbitrary<GenNode> = fc.integer({ min: 0, max: 3 }).chain((gpus) =>
      fc.record({
        gpus: fc.constant(gpus),
        max: fc.integer({ min: 1, max: 3 }),
        replicas: fc.array(fc.record({ kind: fc.constantFrom<Kind>("ready", "ready", "loading", "reserved", "pending", "leftover"), gpu: fc.option(fc.integer({ min: 0, max: Math.max(0, gpus - 1) }), { nil: undefined }) }), { maxLength: 3 }),
      }),
    );
    fc.assert(
      fc.property(fc.array(nodeArb, { minLength: 1, maxLength: 6 }), fc.constantFrom<ModelSpec["spread"]>("node", "gpu", "any"), fc.constantFrom("binpack" as const, "spread" as const), (gen, spread, strategy) => {
        const ids = gen.map((_, i) => `n${String(i)}`);
        const { core, leftovers, view } = cluster(records(gen.map((n, i) => ({ nodeId: ids[i] ?? "", ...(n.gpus === 0 ? {} : { gpuGiB: Array.from({ length: n.gpus }, () => 24) }), limits: { maxReplicasPerModel: n.max } }))), strategy);
        gen.forEach((n, i) => {
          const nodeId = ids[i] ?? "";
          for (const r of n.replicas) {
            const s = replica(nodeId, "m", r.gpu === undefined ? {} : { gpu: r.gpu });
            if (r.kind === "reserved") expect(core.admit({ nodeId, model: "m", incarnation: s.incarnation, sizeBytes: GiB }).t).toBe("admitted");
            else if (r.kind === "loading") core.registerLoading(s);
            else if (r.kind === "leftover") leftovers.add({ incarnation: s.incarnation, nodeId, model: "m", address: s.address, groups: [], sizeBytes: GiB, lastError: "stop failed" });
            else {
              core.registerReady(s);
              if (r.kind === "pending") expect(core.selectExplicit(s.incarnation, { reason: "admin" }).t).toBe("stop");
            }
          }
        });
        // The oracle, from the generated cluster.
        const allowed = gen.map((n) => {
          const count = n.replicas.length;
          const devices = Math.max(1, n.gpus);
          // A reservation has no device yet (admission takes none) and a leftover none known: each counts as a device of its own.
          const deviceUnknown = (r: GenNode["replicas"][number]): boolean => r.kind === "leftover" || r.kind === "reserved" || r.gpu === undefined;
          const known = new Set(n.replicas.filter((r) => !deviceUnknown(r)).map((r) => r.gpu));
          const withReplica = known.size + n.replicas.filter(deviceUnknown).length;
          if (count >= n.max) return false;
          if (spread === "node") return count === 0;
          if (spread === "gpu") return count === 0 || withReplica < devices;
          return true;
        });
        const s = spec({ spread });
        const choice = view.choose(s);
        const plan = view.plan(s);
        seen.ruledOut += allowed.filter((a) => !a).length;
        if (choice.nodeId === undefined) {
          expect(allowed.some(Boolean)).toBe(false);
          return;
        }
        seen.chosen++;
        const i = ids.indexOf(choice.nodeId);
        expect(allowed[i]).toBe(true);
        if (plan.t !== "no-fit") expect(plan.nodeId).toBe(choice.nodeId);
        // any/gpu: a node holding a replica only when every allowed node holds one.
        const holds = (gen[i]?.replicas.length ?? 0) > 0;
        if (holds) {
          seen.fallbackToHolder++;
          expect(gen.every((n, k) => !allowed[k] || n.replicas.length > 0)).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
    expect(seen.chosen).toBeGreaterThan(0);
    expect(seen.ruledOut).toBeGreaterThan(0);
    expect(seen.fallbackToHolder).toBeGreaterThan(0);
  });
});
