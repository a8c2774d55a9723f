/**
 * ExplainPlacement's cost and its stopping, over a real WatchdogCore and the
 * coordinator's PlacementView (the node table is a plain list): the work is
 * counted (calls into the core per node, instance views copied), never timed, and the
 * answers are those of the rules it had before, recomputed here the slow way.
 */
import { describe, expect, it, vi } from "vitest";
import { Code, isWardenError, seededRng } from "@warden/common";
import { modelSpec, type Loader, type ModelSpec } from "@warden/loader";
import type { PlacementNode, PlacementNodes } from "@warden/cluster";
import { createWatchdogCore, type WatchdogCore } from "@warden/watchdog";
import { explainPageOf, explainPlacement } from "./explain-placement.js";
import { PlacementView } from "./placement-view.js";

const GiB = 1024 ** 3;

interface Cluster {
  readonly core: WatchdogCore;
  readonly view: PlacementView;
}

/** `nodeCount` ready nodes, each holding `perNode` ready instances of other models; the limit per node is `perNode` (every node must evict). */
function cluster(nodeCount: number, perNode: number): Cluster {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode: perNode } });
  const list: PlacementNode[] = [];
  for (let n = 0; n < nodeCount; n++) {
    const nodeId = `n${String(n).padStart(5, "0")}`;
    list.push({ nodeId, state: "ready", draining: false, labels: {}, backends: new Set<string>(), resources: undefined });
    for (let i = 0; i < perNode; i++) core.registerReady({ nodeId, model: `o${String(i)}`, incarnation: `inc-${String(n)}-${String(i)}`, address: `10.${String(n >> 8)}.${String(n & 255)}.${String(i)}:5000`, sizeBytes: GiB, groups: i === 0 ? ["g"] : [] });
  }
  const nodes: PlacementNodes = { list: () => list, limitsOf: () => ({ maxReplicasPerModel: 4 }) };
  const view = new PlacementView(nodes, "binpack");
  view.attach({ core, getPolicy: () => core.getPolicy(), leftoverList: () => [], journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] }, startingElsewhere: () => [].values() } as unknown as Loader);
  return { core, view };
}

const spec = (groups: string[] = []): ModelSpec => modelSpec({ id: "m", backend: "backend-sim", sizeBytes: GiB, spread: "any", groups, replicas: { min: 0, max: 2, targetInFlight: 4, scaleDownAfterMs: 300_000 } });

/** Per-node reads of the core (summaries, evictions) and instance views copied while `fn` runs. */
async function work(core: WatchdogCore, fn: () => Promise<unknown>): Promise<number> {
  const counted = (["placementSummary", "instances", "instancesOfModel"] as const).filter((m) => m in core);
  const spies = counted.map((m) => vi.spyOn(core, m));
  try {
    await fn();
    let units = 0;
    for (const s of spies) for (const r of s.mock.results) units += 1 + (Array.isArray(r.value) ? r.value.length : 0);
    return units;
  } finally {
    for (const s of spies) s.mockRestore();
  }
}

describe("ExplainPlacement's work is linear in nodes + instances", () => {
  it("twice the nodes (each at its limit, so each one's evictions are read) is about twice the work, not four times", async () => {
    const counts: number[] = [];
    for (const nodes of [40, 80]) {
      const { core, view } = cluster(nodes, 3);
      counts.push(await work(core, () => explainPlacement({ core, placement: view, nowMs: 1_000 }, spec(["g"]))));
    }
    const [small = 0, large = 0] = counts;
    expect(small).toBeGreaterThan(0);
    // Quadratic (every node's candidates and every instance per node) is about 4x here.
    expect(large / small).toBeLessThanOrEqual(2.1);
  });
});

/** What an admission on the node would evict, by the rules as written before (every instance of the cluster filtered by node). */
function evictionsTheSlowWay(core: WatchdogCore, view: PlacementView, s: ModelSpec, nodeId: string): string[] {
  const c = view.candidates(s).find((x) => x.nodeId === nodeId);
  if (c === undefined) return [];
  const out = new Set<string>();
  const onNode = core.snapshot().instances.filter((v) => v.nodeId === nodeId && v.state === "ready" && v.pendingEviction === undefined && !v.pinned);
  for (const v of onNode) if (v.groups.some((g) => s.groups.includes(g)) && v.model !== s.id) out.add(`${v.model}@${v.incarnation}`);
  if (c.limit > 0) {
    const need = c.occupied + 1 - c.limit - out.size;
    const lru = onNode.filter((v) => v.model !== s.id && !out.has(`${v.model}@${v.incarnation}`) && v.inFlight === 0).sort((a, b) => (a.lastUsedMs ?? 0) - (b.lastUsedMs ?? 0));
    for (const v of lru.slice(0, Math.max(0, need))) out.add(`${v.model}@${v.incarnation}`);
  }
  return [...out];
}

describe("ExplainPlacement's answers are those of the per-cluster rules", () => {
  it("on random clusters (busy, pinned, stopping, grouped instances; nodes under, at and over the limit) every node's evictions match", async () => {
    const rng = seededRng(28);
    const pick = (n: number): number => Math.floor(rng.next() * n);
    let evicting = 0;
    for (let round = 0; round < 30; round++) {
      const limit = pick(4);
      const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode: limit, pinnedModels: ["p"] } });
      const list: PlacementNode[] = [];
      let seq = 0;
      for (let n = 0; n < 6; n++) {
        const nodeId = `n${String(n)}`;
        list.push({ nodeId, state: "ready", draining: false, labels: {}, backends: new Set<string>(), resources: undefined });
        for (let i = pick(5); i > 0; i--) {
          seq++;
          const model = ["m", "a", "b", "p"][pick(4)] ?? "a";
          const address = `10.0.${String(seq)}.1:5000`;
          const v = core.registerReady({ nodeId, model, incarnation: `inc-${String(seq)}`, address, sizeBytes: GiB, groups: model === "a" ? ["g"] : [] });
          const roll = pick(4);
          if (roll === 0) core.mark(address);
          else if (roll === 1) core.selectExplicit(v.incarnation, { reason: "admin" });
          else if (roll === 2) core.updateLastUsed(address);
        }
      }
      const nodes: PlacementNodes = { list: () => list, limitsOf: () => ({ maxReplicasPerModel: 4 }) };
      const view = new PlacementView(nodes, "binpack");
      view.attach({ core, getPolicy: () => core.getPolicy(), leftoverList: () => [], journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] }, startingElsewhere: () => [].values() } as unknown as Loader);
      const s = spec(pick(2) === 0 ? ["g"] : []);
      const r = await explainPlacement({ core, placement: view, nowMs: 1_000 }, s);
      evicting += (r.nodes ?? []).filter((n) => (n.wouldEvict?.length ?? 0) > 0).length;
      for (const n of r.nodes ?? []) expect([...(n.wouldEvict ?? [])], `round ${String(round)} node ${n.nodeId ?? ""}`).toEqual(evictionsTheSlowWay(core, view, s, n.nodeId ?? ""));
      for (const n of list) expect(view.wouldEvict(s, n.nodeId)).toEqual(evictionsTheSlowWay(core, view, s, n.nodeId));
    }
    // The comparison covered nodes with something to evict, not only empty answers.
    expect(evicting).toBeGreaterThan(20);
  });
});

describe("ExplainPlacement stops with its caller", () => {
  it("an aborted signal between nodes: rejects with its reason (CANCELLED) and reads no node after it", async () => {
    const { core, view } = cluster(50, 2);
    const ctl = new AbortController();
    let read = 0;
    // The caller goes away while the 10th node is read (its records: candidate and evictions).
    const summary = core.placementSummary.bind(core);
    vi.spyOn(core, "placementSummary").mockImplementation((...a: Parameters<typeof summary>) => (++read === 10 ? (ctl.abort(), summary(...a)) : summary(...a)));
    const yielded: number[] = [];
    const err = await explainPlacement({ core, placement: view, nowMs: 1_000, slicing: { signal: ctl.signal, sliceMs: 0, nowMs: () => 0, yieldNow: async () => void yielded.push(read) } }, spec()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isWardenError(err, Code.Canceled), String(err)).toBe(true);
    expect(read).toBe(10);
    // sliceMs 0: it yielded before every node it read.
    expect(yielded.length).toBeGreaterThanOrEqual(10);
  });

  it("yields once per slice of work: a clock that reads 1 ms later at each look, slices of 10 ms, 100 nodes looked at once each as they are read and the answer once per chunk of 256: about 10 yields, and an answer", async () => {
    const { core, view } = cluster(100, 2);
    let ms = 0;
    let yields = 0;
    const r = await explainPlacement({ core, placement: view, nowMs: 1_000, slicing: { sliceMs: 10, nowMs: () => ms++, yieldNow: async () => { yields++; } } }, spec());
    expect(r.nodes).toHaveLength(100);
    expect(yields).toBeGreaterThanOrEqual(8);
    expect(yields).toBeLessThanOrEqual(12);
  });

  it("answers a large cluster in slices too: 1 000 nodes read and a page of all 1 000 answered, yields in the answer's chunks as well as the reading", async () => {
    const { core, view } = cluster(1000, 1);
    let ms = 0;
    const yieldsAt: number[] = [];
    let read = 0;
    const summary = core.placementSummary.bind(core);
    vi.spyOn(core, "placementSummary").mockImplementation((...a: Parameters<typeof summary>) => {
      read++;
      return summary(...a);
    });
    // Each look at the clock a millisecond; a slice of 1 ms: a yield at every look that finds the slice spent.
    const m = spec();
    const r = await explainPlacement({ core, placement: view, nowMs: 1_000, slicing: { sliceMs: 1, nowMs: () => ms++, yieldNow: async () => { yieldsAt.push(read); } } }, m, undefined, explainPageOf({ model: m.id, pageSize: 1000, pageToken: "", nodeIdPrefix: "" }));
    expect(r.nodes).toHaveLength(1000);
    expect(r.nextPageToken).toBe("");
    // Some yields after every node was read: the answer (4 chunks of 256) was made in slices.
    expect(yieldsAt.filter((n) => n === 1000).length).toBeGreaterThanOrEqual(3);
  });
});
