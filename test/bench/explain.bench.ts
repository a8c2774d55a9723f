/**
 * ExplainPlacement's CPU per call, in process, over a real WatchdogCore and
 * the coordinator's PlacementView, at 100 … 10 000 nodes × 10 ready
 * instances. The limit per node is 10 and one instance per node shares the
 * explained model's group, so every node's evictions are read (the worst
 * case). CPU is `process.cpuUsage` per call (user + system), steadier than
 * wall time on a shared machine.
 *
 * Baselines, each measured in the same run:
 * - up to 1 000 nodes, every node's verdict in one answer against the
 *   quadratic algorithm before it (kept below as a bench-only copy): each
 *   node's evictions rebuilt every node's candidates and copied every
 *   instance of the cluster;
 * - at 5 000 and 10 000 nodes (the old one takes minutes there), the
 *   answer as the API gives it by default (the decision and the counts over
 *   every node, the first 100 verdicts explained) against every node's
 *   verdict explained and encoded in one answer (as the call answered before
 *   it listed a page), and a naive floor: one copy of every instance of the
 *   cluster (`core.snapshot()`), which any snapshot-based explanation pays at
 *   least once.
 *
 * Past ~1 000 nodes the CPU per node is set by memory, not by the count of
 * steps: each instance read is a cache miss, and what a call allocates (about
 * 16 MB at 10 000 nodes) is the young-generation collection's work, promoted
 * to the old generation if a call outlives two of them. The coordinator
 * ships with `--max-semi-space-size=64`; `NODE_OPTIONS=--max-semi-space-size=64
 * npm run bench -- explain` measures with it.
 */
import { modelSpec, type Loader, type ModelSpec } from "@warden/loader";
import type { PlacementNode, PlacementNodes } from "@warden/cluster";
import type { NodeResources } from "@warden/proto";
import { createWatchdogCore, type WatchdogCore } from "@warden/watchdog";
import { explainPlacement, type ExplainPageAsk } from "../../services/coordinator/src/admin/explain-placement.js";
import { PlacementView } from "../../services/coordinator/src/admin/placement-view.js";
import { cpuPerCall, median, p99Of, type BenchResult } from "./bench-result.js";

const GiB = 1024 ** 3;
const perNode = 10;

interface Cluster {
  readonly core: WatchdogCore;
  readonly view: PlacementView;
  readonly spec: ModelSpec;
}

function cluster(nodeCount: number): Cluster {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode: perNode } });
  const list: PlacementNode[] = [];
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `node-${String(n).padStart(5, "0")}`;
    const resources: NodeResources = { $typeName: "warden.v1.NodeResources", gpus: [{ $typeName: "warden.v1.GpuInfo", index: 0, name: "fake", totalBytes: BigInt(80 * GiB), usedBytes: BigInt((10 + (n % 20)) * GiB) }], ramTotalBytes: 0n, ramUsedBytes: 0n };
    list.push({ nodeId, state: "ready", draining: false, labels: { zone: `z${String(n % 4)}` }, backends: new Set<string>(), resources });
    for (let i = 0; i < perNode; i++) {
      const address = `10.${String(n >> 8)}.${String(n & 255)}.${String(i)}:5000`;
      core.registerReady({ nodeId, model: `m${String(i)}`, incarnation: `inc-${String(n)}-${String(i)}`, address, sizeBytes: 2 * GiB, groups: i === 0 ? ["g"] : [] });
      core.updateLastUsed(address);
    }
  }
  const nodes: PlacementNodes = { list: () => list, limitsOf: () => ({}) };
  const view = new PlacementView(nodes, "binpack");
  // The loader's placement-facing surface over the real core: no held leftovers, journal or foreign loads.
  view.attach({ core, getPolicy: () => core.getPolicy(), leftoverList: () => [], journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] }, startingElsewhere: () => [].values() } as unknown as Loader);
  const spec = modelSpec({ id: "incoming", backend: "b", sizeBytes: 4 * GiB, groups: ["g"] });
  return { core, view, spec };
}

/** The algorithm before (bench-only copy): per node, every node's candidates and a snapshot of every instance. */
function oldWouldEvict(c: Cluster, nodeId: string): string[] {
  const cand = c.view.candidates(c.spec).find((x) => x.nodeId === nodeId);
  const snap = c.core.snapshot();
  if (cand === undefined) return [];
  const out = new Set<string>();
  const onNode = snap.instances.filter((v) => v.nodeId === nodeId && v.state === "ready" && v.pendingEviction === undefined && !v.pinned);
  for (const v of onNode) if (v.groups.some((g) => c.spec.groups.includes(g)) && v.model !== c.spec.id) out.add(`${v.model}@${v.incarnation}`);
  if (cand.limit > 0) {
    const need = cand.occupied + 1 - cand.limit - out.size;
    const lru = onNode.filter((v) => v.model !== c.spec.id && !out.has(`${v.model}@${v.incarnation}`) && v.inFlight === 0).sort((a, b) => (a.lastUsedMs ?? 0) - (b.lastUsedMs ?? 0));
    for (const v of lru.slice(0, Math.max(0, need))) out.add(`${v.model}@${v.incarnation}`);
  }
  return [...out];
}

function oldExplain(c: Cluster): number {
  let evicted = 0;
  for (const v of c.view.plan(c.spec).verdicts) evicted += oldWouldEvict(c, v.nodeId).length;
  return evicted;
}

/** Every node's verdict in one answer (as the call answered before it listed a page; the API serves at most 1 000 a page). */
const everyNode = (c: Cluster): ExplainPageAsk => ({ size: c.view.candidates(c.spec).length, filters: "" });

async function newExplain(c: Cluster, page?: ExplainPageAsk): Promise<number> {
  const r = await explainPlacement({ core: c.core, placement: c.view, nowMs: 1_000 }, c.spec, undefined, page);
  let evicted = 0;
  for (const n of r.nodes ?? []) evicted += n.wouldEvict?.length ?? 0;
  return evicted;
}

const p99 = p99Of;

const spread = (v: readonly number[]): string => `${(v[0] ?? 0).toFixed(1)}–${(v[v.length - 1] ?? 0).toFixed(1)}`;

export async function run(): Promise<BenchResult[]> {
  const out: BenchResult[] = [];
  for (const [nodes, oldCalls] of [
    [100, 9],
    [500, 3],
    [1_000, 1],
  ] as const) {
    const c = cluster(nodes);
    const all = everyNode(c);
    // Same answers both ways (every node evicts: at its limit, with a group conflict).
    const a = await newExplain(c, all);
    const b = oldExplain(c);
    if (a !== b || a < nodes) throw new Error(`explain evictions: new ${String(a)}, old ${String(b)}, nodes ${String(nodes)}`);
    await cpuPerCall(5, () => newExplain(c, all));
    const ours = await cpuPerCall(31, () => newExplain(c, all));
    const base = await cpuPerCall(oldCalls, () => oldExplain(c));
    process.stderr.write(`explain ${String(nodes)} nodes: ours ${spread(ours)} ms CPU, old ${spread(base)} ms CPU\n`);
    out.push({ name: `ExplainPlacement CPU per call, median (${String(nodes)} nodes × ${String(perNode)} instances)`, baseline: "the algorithm before: every node's candidates and every instance, per node", ours: median(ours), baselineValue: median(base), unit: "ms CPU", higherIsBetter: false });
  }
  for (const nodes of [5_000, 10_000]) {
    const c = cluster(nodes);
    const all = everyNode(c);
    await cpuPerCall(3, () => newExplain(c));
    // The answer as the API gives it by default (the decision and the counts over every node, 100 verdicts),
    // against every node's verdict in one answer (the call before it listed a page), and one copy of every instance.
    const ours = await cpuPerCall(101, () => newExplain(c));
    const whole = await cpuPerCall(31, () => newExplain(c, all));
    const base = await cpuPerCall(21, () => c.core.snapshot().instances.length);
    process.stderr.write(`explain ${String(nodes)} nodes: a page of 100 ${spread(ours)} ms CPU (p99 ${p99(ours).toFixed(1)}), every node's verdict ${spread(whole)} ms CPU, one snapshot ${spread(base)} ms CPU\n`);
    const label = `${String(nodes)} nodes × ${String(perNode)} instances`;
    const floor = "one copy of every instance (core.snapshot())";
    const before = "every node's verdict explained and encoded in one answer (the call before it answered a page)";
    out.push({ name: `ExplainPlacement CPU per call, default page of 100 verdicts, median (${label})`, baseline: before, ours: median(ours), baselineValue: median(whole), unit: "ms CPU", higherIsBetter: false });
    out.push({ name: `ExplainPlacement CPU per call, default page of 100 verdicts, p99 (${label})`, baseline: before, ours: p99(ours), baselineValue: p99(whole), unit: "ms CPU", higherIsBetter: false });
    out.push({ name: `ExplainPlacement CPU per call, default page of 100 verdicts, median (${label})`, baseline: floor, ours: median(ours), baselineValue: median(base), unit: "ms CPU", higherIsBetter: false });
  }
  return out;
}
