import { describe, expect, it } from "vitest";
import { planPlacement } from "./index.js";
import { GiB, node } from "./node-candidate.fixture.js";

const req = { model: "m", sizeBytes: GiB, selector: { gpu: "a100" } };

describe("a node ruled out only by a state that ends is waitable", () => {
  it("draining or unreachable with a matching selector: waitable (a load waits for it)", () => {
    const plan = planPlacement(req, [node({ nodeId: "d", draining: true, labels: { gpu: "a100" } }), node({ nodeId: "u", state: "unreachable", labels: { gpu: "a100" } })], "binpack", { explain: true });
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts.map((v) => [v.nodeId, v.waitable, v.reason])).toEqual([
      ["d", true, "node is draining"],
      ["u", true, "node is unreachable"],
    ]);
  });

  it("at its maxReplicasPerModel: waitable only while some of the model's replicas there are on their way out (a leftover, a pending stop)", () => {
    const nodes = [node({ nodeId: "leaving", labels: { gpu: "a100" }, modelReplicas: 1, departingReplicas: 1 }), node({ nodeId: "held", labels: { gpu: "a100" }, modelReplicas: 1, departingReplicas: 0 })];
    const plan = planPlacement(req, nodes, "binpack", { explain: true });
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts.map((v) => [v.nodeId, v.waitable, v.reason])).toEqual([
      ["held", undefined, "holds 1 replica(s) of m, its maxReplicasPerModel is 1"],
      ["leaving", true, "holds 1 replica(s) of m, its maxReplicasPerModel is 1"],
    ]);
  });

  it("a selector that does not match, a missing backend, or a lost node: not waitable (refused as before)", () => {
    const plan = planPlacement({ ...req, backend: "vllm" }, [node({ nodeId: "s", draining: true, labels: { gpu: "h100" } }), node({ nodeId: "b", draining: true, labels: { gpu: "a100" }, backends: new Set(["llama"]) }), node({ nodeId: "l", state: "lost", labels: { gpu: "a100" } })], "binpack", { explain: false });
    expect(plan.verdicts.map((v) => v.waitable)).toEqual([undefined, undefined, undefined]);
  });

  it("a node's memory budget held by instances eviction cannot remove now: waitable, not eligible (room may come: they may be unpinned, go idle, stop)", () => {
    const plan = planPlacement({ ...req, sizeBytes: 4 * GiB }, [node({ nodeId: "a", labels: { gpu: "a100" }, memoryBudget: { t: "bytes", bytes: 8 * GiB }, reservedBytes: 6 * GiB, evictableBytes: 0 })], "binpack", { explain: true });
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts[0]).toMatchObject({ waitable: true, eligible: false });
    expect(plan.verdicts[0]?.reason).toContain("eviction cannot make room");
  });

  it("a model larger than the node's memory, or its budget: never (not waitable, not eligible), whatever is evicted", () => {
    const nodes = [node({ nodeId: "mem", labels: { gpu: "a100" }, evictableBytes: 24 * GiB }), node({ nodeId: "budget", labels: { gpu: "a100" }, memoryBudget: { t: "bytes", bytes: 8 * GiB } })];
    const plan = planPlacement({ ...req, sizeBytes: 30 * GiB }, nodes, "binpack", { explain: true });
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts.map((v) => [v.nodeId, v.waitable, v.eligible])).toEqual([
      ["budget", undefined, false],
      ["mem", undefined, false],
    ]);
    expect(plan.verdicts.find((v) => v.nodeId === "mem")?.reason).toBe(`model needs ${String(30 * GiB)} bytes, more than the node holds (${String(24 * GiB)} bytes of memory)`);
    expect(plan.verdicts.find((v) => v.nodeId === "budget")?.reason).toBe(`model needs ${String(30 * GiB)} bytes, more than the node holds (its memory budget ${String(8 * GiB)} bytes)`);
    // Unknown memory (no report, no budget): no cap, as before.
    expect(planPlacement({ ...req, sizeBytes: 30 * GiB }, [node({ nodeId: "x", labels: { gpu: "a100" }, memoryTotalBytes: 0 })], "binpack").t).toBe("place");
  });
});
