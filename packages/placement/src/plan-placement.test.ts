import { describe, expect, it } from "vitest";
import { planPlacement } from "./index.js";
import { GiB, node } from "./node-candidate.fixture.js";

const req = { model: "m", sizeBytes: 8 * GiB, selector: {} };

describe("planPlacement", () => {
  it("binpack picks the node with the least memory left, spread the most", () => {
    const nodes = [node({ nodeId: "a", memoryUsedBytes: 10 * GiB }), node({ nodeId: "b", memoryUsedBytes: 2 * GiB })];
    expect(planPlacement(req, nodes, "binpack")).toMatchObject({ t: "place", nodeId: "a" });
    expect(planPlacement(req, nodes, "spread")).toMatchObject({ t: "place", nodeId: "b" });
  });

  it("uses max(reported use, reservations) so an unreported load still counts", () => {
    const nodes = [node({ nodeId: "a", memoryUsedBytes: 0, reservedBytes: 20 * GiB }), node({ nodeId: "b", memoryUsedBytes: 4 * GiB })];
    const plan = planPlacement(req, nodes, "binpack");
    expect(plan).toMatchObject({ t: "place", nodeId: "b" });
    expect(plan.verdicts.find((v) => v.nodeId === "a")?.reason).toMatch(/needs/);
  });

  it("skips unreachable, draining and selector-mismatched nodes with a reason each", () => {
    const nodes = [node({ nodeId: "a", state: "unreachable" }), node({ nodeId: "b", draining: true }), node({ nodeId: "c", labels: { gpu: "t4" } })];
    const plan = planPlacement({ ...req, selector: { gpu: "a100" } }, nodes, "binpack");
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts.map((v) => v.reason)).toEqual(["node is unreachable", "node is draining", "selector gpu=a100 does not match (node has gpu=t4)"]);
  });

  it("skips a node whose agent's catalog lacks the model's backend; an empty catalog (an older agent) can run anything", () => {
    const nodes = [node({ nodeId: "a", backends: new Set(["other"]) }), node({ nodeId: "b", backends: new Set() }), node({ nodeId: "c", backends: new Set(["sim", "other"]) })];
    const plan = planPlacement({ ...req, backend: "sim" }, nodes, "binpack");
    expect(plan.verdicts.map((v) => [v.nodeId, v.fits])).toEqual([["a", false], ["b", true], ["c", true]]);
    expect(plan.verdicts[0]?.reason).toBe('agent has no backend "sim" in its catalog');
    const none = planPlacement({ ...req, backend: "sim" }, [nodes[0]!], "binpack");
    expect(none).toMatchObject({ t: "no-fit", reason: 'no node fits: a: agent has no backend "sim" in its catalog' });
  });

  it("a leftover in a conflicting group blocks the node; an evictable conflict plans an eviction", () => {
    const nodes = [node({ nodeId: "a", blockingConflicts: ["leftover x"] }), node({ nodeId: "b", evictableConflicts: ["y"], evictableSlots: 1, evictableBytes: GiB })];
    const plan = planPlacement(req, nodes, "binpack");
    expect(plan).toMatchObject({ t: "evict-then-place", nodeId: "b" });
    expect(plan.verdicts[0]?.reason).toMatch(/cannot resolve/);
  });

  it("a full node whose instances cannot be evicted gives no-fit", () => {
    const plan = planPlacement(req, [node({ nodeId: "a", occupied: 2, limit: 2, evictableSlots: 0 })], "binpack");
    expect(plan.t).toBe("no-fit");
    expect(plan.reason).toMatch(/limit reached/);
  });

  it("no nodes at all says so", () => {
    expect(planPlacement(req, [], "spread")).toMatchObject({ t: "no-fit", reason: "no node is registered" });
  });
});
