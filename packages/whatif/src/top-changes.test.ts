import { describe, expect, it } from "vitest";
import { ReplayMeter, type NodeMemoryReport, type ReplayReport } from "./replay-meter.js";
import { memoryChangeThreshold, memoryChanges, topChanges } from "./top-changes.js";

const gib = 1024 ** 3;

function report(nodes: NodeMemoryReport[], coldStartsByModel: Record<string, number> = {}): ReplayReport {
  const cold = Object.values(coldStartsByModel).reduce((a, b) => a + b, 0);
  return { calls: 10, coldStarts: cold, coldStartsByModel, callsWaited: 0, waitP50Ms: 0, waitP99Ms: 0, evictionsByReason: {}, failedCalls: 0, nodes, idleInstanceHours: 0, replicaSeconds: 0, spanMs: 1 };
}

const node = (nodeId: string, peakByModel: Record<string, number>): NodeMemoryReport => {
  const peakBytes = Object.values(peakByModel).reduce((a, b) => a + b, 0);
  return { nodeId, totalBytes: 24 * gib, peakBytes, meanBytes: peakBytes / 2, peakByModel };
};

describe("top changes: memory", () => {
  it("the threshold is 10 % of the larger peak, clamped to 0.1–0.5 GiB", () => {
    expect(memoryChangeThreshold(20 * gib)).toBe(0.5 * gib);
    expect(memoryChangeThreshold(3 * gib)).toBeCloseTo(0.3 * gib);
    expect(memoryChangeThreshold(0.2 * gib)).toBe(0.1 * gib);
  });

  it("a model's loads that raise a node's peak join that model's cold-start line", () => {
    const cur = report([node("gpu-1", { "chat-small": 4 * gib }), node("gpu-2", { embed: 1 * gib, "chat-large": 10 * gib })], { "chat-large": 41, "chat-small": 3 });
    const cand = report([node("gpu-1", { "chat-small": 4 * gib }), node("gpu-2", { embed: 1 * gib, "chat-large": 12.1 * gib })], { "chat-large": 6, "chat-small": 3 });
    expect(memoryChanges(cur, cand)).toEqual([{ nodeId: "gpu-2", fromBytes: 11 * gib, toBytes: 13.1 * gib, model: "chat-large" }]);
    expect(topChanges(cur, cand)).toEqual(["chat-large: 41 cold starts → 6, +2.1 GiB peak on gpu-2"]);
  });

  it("a model with the same cold starts gets a line of its own; a peak lowered reads as a minus", () => {
    const cur = report([node("gpu-1", { a: 4 * gib, b: 2 * gib })], { a: 1, b: 1 });
    const cand = report([node("gpu-1", { a: 4 * gib })], { a: 1, b: 1 });
    expect(topChanges(cur, cand)).toEqual(["b: −2.0 GiB peak on gpu-1"]);
  });

  it("when several models' memory at the peak differs, the change is the node's, with both peaks", () => {
    const cur = report([node("gpu-1", { a: 8 * gib })], { a: 2, b: 1 });
    const cand = report([node("gpu-1", { a: 4 * gib, b: 6 * gib })], { a: 2, b: 1 });
    const changes = memoryChanges(cur, cand);
    expect(changes).toEqual([{ nodeId: "gpu-1", fromBytes: 8 * gib, toBytes: 10 * gib, model: undefined }]);
    expect(topChanges(cur, cand)).toEqual(["gpu-1: +2.0 GiB peak (8.0 → 10.0 GiB)"]);
  });

  it("a change under the threshold, a node only one side has, and a recorded side (no nodes) give no memory line", () => {
    const cur = report([node("gpu-1", { a: 20 * gib }), node("gpu-3", { a: 1 * gib })]);
    const cand = report([node("gpu-1", { a: 20.4 * gib }), node("gpu-2", { a: 5 * gib })]);
    expect(memoryChanges(cur, cand)).toEqual([]);
    expect(topChanges(cur, cand)).toEqual([]);
    const recorded: Partial<ReplayReport> = { coldStarts: 1, coldStartsByModel: {} };
    expect(memoryChanges(recorded, cand)).toEqual([]);
  });

  it("the meter keeps what each model held on a node when it first reached its peak", () => {
    const m = new ReplayMeter(new Map());
    m.addNode("gpu-1", 24 * gib, 0);
    m.memory("gpu-1", "a", 4 * gib, 0);
    m.memory("gpu-1", "b", 2 * gib, 10);
    // a goes, c comes: 5 GiB in use, under the 6 GiB peak; the peak's figures stay a + b.
    m.memory("gpu-1", "a", -4 * gib, 20);
    m.memory("gpu-1", "c", 3 * gib, 30);
    m.memory("gpu-1", "b", -2 * gib, 40);
    const [n] = m.report(0, 50).nodes;
    expect(n?.peakBytes).toBe(6 * gib);
    expect(n?.peakByModel).toEqual({ a: 4 * gib, b: 2 * gib });
  });
});
