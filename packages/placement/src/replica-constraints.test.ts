import { describe, expect, it } from "vitest";
import { planPlacement, type PlacementRequest } from "./index.js";
import { GiB, node } from "./node-candidate.fixture.js";

const req = (spread: PlacementRequest["spread"]): PlacementRequest => ({ model: "m", sizeBytes: 4 * GiB, selector: {}, ...(spread === undefined ? {} : { spread }) });
const reasonOf = (plan: ReturnType<typeof planPlacement>, nodeId: string): string | undefined => plan.verdicts.find((v) => v.nodeId === nodeId)?.reason;

describe("planPlacement: replicas", () => {
  it("spread node: never a second replica where one is, even with room and maxReplicasPerModel 2", () => {
    // "a" is the binpack optimum (least memory left) but holds a replica.
    const nodes = [node({ nodeId: "a", memoryUsedBytes: 10 * GiB, modelReplicas: 1, maxReplicasPerModel: 2, devices: 2, devicesWithReplica: 1 }), node({ nodeId: "b" })];
    const plan = planPlacement(req("node"), nodes, "binpack");
    expect(plan).toMatchObject({ t: "place", nodeId: "b" });
    expect(reasonOf(plan, "a")).toBe("already holds a replica of m (spread: node)");
    expect(plan.verdicts.find((v) => v.nodeId === "a")).toMatchObject({ fits: false, fitsAfterEviction: false, eligible: false });
    // Only nodes with a replica: no-fit, and the reason names spread.
    const none = planPlacement(req("node"), [nodes[0]!], "binpack");
    expect(none).toMatchObject({ t: "no-fit", reason: "no node fits: a: already holds a replica of m (spread: node)" });
  });

  it("a leftover or pending replica counts on its node like a ready one (the caller counts it in modelReplicas)", () => {
    const plan = planPlacement(req("node"), [node({ nodeId: "a", modelReplicas: 1, maxReplicasPerModel: 4, devicesWithReplica: 1 })], "spread");
    expect(plan.t).toBe("no-fit");
  });

  it("spread gpu: a node with two GPUs takes a second replica on its free device, not a third", () => {
    const two = node({ nodeId: "a", modelReplicas: 1, maxReplicasPerModel: 4, devices: 2, devicesWithReplica: 1 });
    expect(planPlacement(req("gpu"), [two], "binpack")).toMatchObject({ t: "place", nodeId: "a" });
    const full = node({ nodeId: "a", modelReplicas: 2, maxReplicasPerModel: 4, devices: 2, devicesWithReplica: 2 });
    const plan = planPlacement(req("gpu"), [full], "binpack");
    expect(plan.t).toBe("no-fit");
    expect(reasonOf(plan, "a")).toBe("every GPU device already holds a replica of m (spread: gpu; 2/2 devices)");
    // A node reporting no GPUs is one device.
    const ram = node({ nodeId: "r", modelReplicas: 1, maxReplicasPerModel: 4, devices: 1, devicesWithReplica: 1 });
    expect(planPlacement(req("gpu"), [ram], "binpack").t).toBe("no-fit");
  });

  it("spread gpu and any prefer a node without a replica, then a free device, over the better score", () => {
    const shared = node({ nodeId: "a", memoryUsedBytes: 12 * GiB, modelReplicas: 1, maxReplicasPerModel: 4, devices: 2, devicesWithReplica: 1 });
    const empty = node({ nodeId: "b" });
    for (const spread of ["gpu", "any"] as const) expect(planPlacement(req(spread), [shared, empty], "binpack")).toMatchObject({ t: "place", nodeId: "b" });
    // any: two nodes with replicas — the one with a free device first, even against binpack's score.
    const busyDevice = node({ nodeId: "c", memoryUsedBytes: 16 * GiB, modelReplicas: 1, maxReplicasPerModel: 4, devices: 1, devicesWithReplica: 1 });
    expect(planPlacement(req("any"), [busyDevice, shared], "binpack")).toMatchObject({ t: "place", nodeId: "a" });
  });

  it("spread any falls back to a node that holds a replica when none without one fits, and says so", () => {
    const has = node({ nodeId: "a", modelReplicas: 1, maxReplicasPerModel: 2, devicesWithReplica: 1 });
    const fullNode = node({ nodeId: "b", memoryUsedBytes: 22 * GiB });
    const plan = planPlacement(req("any"), [has, fullNode], "spread");
    expect(plan).toMatchObject({ t: "place", nodeId: "a" });
    expect(plan.reason).toMatch(/holds 1 replica\(s\) of m already, on every device/);
    // The default (spread omitted) is any.
    expect(planPlacement(req(undefined), [has, fullNode], "spread")).toMatchObject({ t: "place", nodeId: "a" });
  });

  it("maxReplicasPerModel: a node at that count for the model is excluded in every spread mode", () => {
    for (const spread of ["node", "gpu", "any"] as const) {
      const plan = planPlacement(req(spread), [node({ nodeId: "a", modelReplicas: 2, maxReplicasPerModel: 2, devices: 4, devicesWithReplica: 2 })], "binpack");
      expect(plan.t).toBe("no-fit");
      expect(reasonOf(plan, "a")).toBe("holds 2 replica(s) of m, its maxReplicasPerModel is 2");
      expect(plan.verdicts[0]?.eligible).toBe(false);
    }
    // The default 1: a node with one replica takes no second one even under any.
    expect(planPlacement(req("any"), [node({ nodeId: "a", modelReplicas: 1, devicesWithReplica: 1 })], "binpack").t).toBe("no-fit");
  });

  it("memory budget in bytes caps free memory: min(total, budget) − accounted", () => {
    const a = node({ nodeId: "a", reservedBytes: 6 * GiB, memoryBudget: { t: "bytes", bytes: 8 * GiB } });
    const plan = planPlacement({ ...req("any"), sizeBytes: 3 * GiB }, [a], "binpack");
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts[0]).toMatchObject({ freeBytes: 2 * GiB, eligible: false });
    expect(reasonOf(plan, "a")).toBe(`over its memory budget ${String(8 * GiB)} bytes: needs ${String(3 * GiB)} bytes, ${String(2 * GiB)} bytes free within it, eviction cannot make room`);
    const fits = planPlacement({ ...req("any"), sizeBytes: 2 * GiB }, [a], "binpack");
    expect(fits).toMatchObject({ t: "place", nodeId: "a" });
    expect(fits.reason).toMatch(/2147483648 bytes free within its memory budget 8589934592 bytes/);
    // A budget above the total leaves the total as the cap.
    const big = planPlacement(req("any"), [node({ nodeId: "a", memoryBudget: { t: "bytes", bytes: 100 * GiB } })], "binpack");
    expect(big.verdicts[0]?.freeBytes).toBe(24 * GiB);
    // Reported use counts against the budget (Warden cannot tell its own use from others').
    const used = planPlacement(req("any"), [node({ nodeId: "a", memoryUsedBytes: 7 * GiB, memoryBudget: { t: "bytes", bytes: 8 * GiB } })], "binpack");
    expect(used.verdicts[0]).toMatchObject({ fits: false, freeBytes: GiB });
    // Memory not reported yet: the budget alone is the cap.
    const unknown = planPlacement(req("any"), [node({ nodeId: "a", memoryTotalBytes: 0, memoryBudget: { t: "bytes", bytes: 2 * GiB } })], "binpack");
    expect(unknown.t).toBe("no-fit");
  });

  it("memory budget in percent of the node's memory; not applied before the node reports memory", () => {
    const half = node({ nodeId: "a", reservedBytes: 10 * GiB, memoryBudget: { t: "percent", percent: 50 } });
    const plan = planPlacement(req("any"), [half], "binpack");
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts[0]?.freeBytes).toBe(2 * GiB);
    expect(reasonOf(plan, "a")).toMatch(/^over its memory budget 50% = 12884901888 bytes: needs 4294967296 bytes, 2147483648 bytes free within it/);
    expect(planPlacement({ ...req("any"), sizeBytes: 2 * GiB }, [half], "binpack").t).toBe("place");
    const unknown = planPlacement(req("any"), [node({ nodeId: "a", memoryTotalBytes: 0, memoryBudget: { t: "percent", percent: 10 } })], "binpack");
    expect(unknown.t).toBe("place");
    expect(unknown.reason).toMatch(/memory budget 10% \(not applied: node memory not reported\)/);
  });

  it("over budget but eviction would make room: evict-then-place, and the node stays eligible", () => {
    const a = node({ nodeId: "a", reservedBytes: 8 * GiB, evictableBytes: 6 * GiB, evictableSlots: 1, memoryBudget: { t: "bytes", bytes: 8 * GiB } });
    const plan = planPlacement(req("any"), [a], "binpack");
    expect(plan).toMatchObject({ t: "evict-then-place", nodeId: "a" });
    expect(plan.verdicts[0]).toMatchObject({ eligible: true, fitsAfterEviction: true });
    expect(plan.reason).toMatch(/needs 4294967296 bytes, 0 bytes free within its memory budget/);
  });
});
