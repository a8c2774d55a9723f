/**
 * ExplainPlacement for the next replica, over a real WatchdogCore
 * and the coordinator's PlacementView; replicas registered on the core
 * directly (distinct incarnations). The process-level ExplainPlacement tests
 * (test/cluster*.test.ts) cover the first replica and "at max" with max 1.
 */
import { describe, expect, it } from "vitest";
import { PlacementDecision } from "@warden/proto";
import { modelSpec, type Loader, type ModelSpec } from "@warden/loader";
import type { PlacementNode, PlacementNodes } from "@warden/cluster";
import { createWatchdogCore, type WatchdogCore } from "@warden/watchdog";
import { explainPlacement } from "./explain-placement.js";
import { PlacementView } from "./placement-view.js";

const GiB = 1024 ** 3;

function setup(nodeIds: readonly string[], limitPerNode = 0): { core: WatchdogCore; explain: (s: ModelSpec, blocked?: Parameters<typeof explainPlacement>[2]) => ReturnType<typeof explainPlacement> } {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode } });
  const list: PlacementNode[] = nodeIds.map((nodeId) => ({ nodeId, state: "ready", draining: false, labels: {}, backends: new Set<string>(), resources: undefined }));
  const nodes: PlacementNodes = { list: () => list, limitsOf: () => ({ maxReplicasPerModel: 4 }) };
  const view = new PlacementView(nodes, "binpack");
  view.attach({ core, getPolicy: () => core.getPolicy(), leftoverList: () => [], journalReplicas: { ofModel: () => [].values(), nodeReported: () => [] }, startingElsewhere: () => [].values() } as unknown as Loader);
  return { core, explain: (s, blocked) => explainPlacement({ core, placement: view, nowMs: 1_000 }, s, blocked) };
}

const spec = (max: number, spread: ModelSpec["spread"] = "node"): ModelSpec => modelSpec({ id: "m", backend: "backend-sim", sizeBytes: GiB, spread, replicas: { min: 0, max, targetInFlight: 4, scaleDownAfterMs: 300_000 } });
let seq = 0;
const at = (nodeId: string, model = "m", gpu?: number) => {
  seq++;
  return { nodeId, model, incarnation: `inc-${String(seq)}`, address: `10.0.${String(seq)}.1:5000`, sizeBytes: GiB, ...(gpu === undefined ? {} : { gpu }) };
};

describe("explainPlacement: no node ready is a wait, not a no-fit", async () => {
  it("no node registered (a leader whose agents have not re-registered yet): WAIT, so `warden predict` keeps waiting instead of exit 7", async () => {
    const { explain } = setup([]);
    const r = await explain(spec(1));
    expect(r).toMatchObject({ decision: PlacementDecision.WAIT });
    expect(r.reason).toContain("no node is registered");
  });
});

describe("explainPlacement: the next replica", async () => {
  it("no replica yet: the plan, its reason unchanged", async () => {
    const { explain } = setup(["a", "b"]);
    const r = await explain(spec(3));
    expect(r).toMatchObject({ decision: PlacementDecision.PLACE, nodeId: "a" });
    expect(r.reason).toMatch(/^node "a": fits/);
  });

  it("below max: plans the next replica, says how many exist, and spread rules out the nodes that hold one", async () => {
    const { core, explain } = setup(["a", "b"]);
    core.registerReady(at("a", "m", 0));
    const r = await explain(spec(3));
    expect(r).toMatchObject({ decision: PlacementDecision.PLACE, nodeId: "b" });
    expect(r.reason).toMatch(/^next replica \(2 of max 3; 1 on node "a" \(ready, gpu 0\)\): node "b": fits/);
    expect(r.nodes?.find((n) => n.nodeId === "a")?.reason).toBe("already holds a replica of m (spread: node)");
  });

  it("at max: ALREADY_LOADED with every replica's node (ready and loading count)", async () => {
    const { core, explain } = setup(["a", "b", "c"]);
    core.registerReady(at("a"));
    core.registerLoading(at("b"));
    const r = await explain(spec(2));
    expect(r).toMatchObject({ decision: PlacementDecision.ALREADY_LOADED, nodeId: "a", nodes: [] });
    expect(r.reason).toBe('already at max replicas (2/2): on node "a" (ready), node "b" (loading)');
  });

  it("a replica being stopped does not count toward max: the next one is planned, and named as not counted", async () => {
    const { core, explain } = setup(["a", "b"]);
    const s = at("a");
    core.registerReady(s);
    expect(core.selectExplicit(s.incarnation, { reason: "admin" }).t).toBe("stop");
    const r = await explain(spec(1));
    expect(r).toMatchObject({ decision: PlacementDecision.PLACE, nodeId: "b" });
    expect(r.reason).toMatch(/^next replica \(1 of max 1; none counted; not counted: node "a" \(pending eviction\)\)/);
  });

  it("what the next replica would evict: another model, never a replica of its own", async () => {
    const { core, explain } = setup(["a"], 2);
    const mine = at("a");
    core.registerReady(mine);
    const other = at("a", "other");
    core.registerReady(other);
    const r = await explain(spec(2, "any"));
    expect(r).toMatchObject({ decision: PlacementDecision.EVICT_THEN_PLACE, nodeId: "a" });
    expect(r.nodes?.[0]?.wouldEvict).toEqual([`other@${other.incarnation}`]);
    expect(r.reason).toMatch(/limit reached \(2\/2\)/);
  });

  it("reports an open scale-up circuit breaker", async () => {
    const { core, explain } = setup(["a"]);
    core.registerReady(at("a"));
    const r = await explain(spec(2), { error: "no node fits", failures: 3, retryAtMs: 9_000 });
    expect(r.decision).toBe(PlacementDecision.NO_FIT);
    expect(r.reason).toMatch(/; scale-up blocked after 3 failure\(s\) \(no node fits\), next attempt in 8000 ms$/);
  });
});
