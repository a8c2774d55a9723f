import { describe, expect, it } from "vitest";
import { modelRows } from "./models-view.js";
import type { DashboardInstance, DashboardLoadJob, DashboardSnapshot } from "./dashboard-view.js";

const inst = (model: string, nodeId: string, state: DashboardInstance["state"], inFlight = 0, lastUsedAt = ""): DashboardInstance => ({ model, nodeId, incarnation: `${model}-${nodeId}`, address: "", state, inFlight, lastUsedAt, busySince: "", sizeBytes: 0, pinned: false, groups: [], backend: "b", nodeState: "ready" });
const cfg = (model: string): DashboardSnapshot["models"][number] => ({ model, backend: "b", groups: [], pinned: false, sizeBytes: 1024 ** 3 });
const rep = (model: string, over: Partial<NonNullable<DashboardSnapshot["replicas"]>[number]> = {}): NonNullable<DashboardSnapshot["replicas"]>[number] => ({ model, min: 0, max: 1, desired: 0, ready: 0, loading: 0, stopping: 0, leftovers: 0, queued: 0, ...over });

describe("modelRows (the Models page)", () => {
  it("lists every configured model, loaded or not, sorted, with replicas, bounds and where it runs", () => {
    const now = Date.parse("2026-01-01T00:01:00Z");
    const s: DashboardSnapshot = {
      at: "",
      nodes: [],
      instances: [inst("b", "n2", "ready", 0, "2026-01-01T00:00:50Z"), inst("b", "n1", "ready", 2, "2026-01-01T00:00:30Z")],
      models: [cfg("c"), cfg("b"), cfg("a")],
      replicas: [rep("a", { blocked: { error: "exit 1: no such file", failures: 3, retryAfterMs: 4_500 } }), rep("b", { min: 1, max: 3, desired: 2, ready: 2 }), rep("c", { loading: 1, desired: 1 })],
    };
    const rows = modelRows(s, now);
    expect(rows.map((r) => [r.model, r.state, r.replicas, r.bounds, r.nodes.join(",")])).toEqual([
      ["a", "blocked", "0/0", "0..1", ""],
      ["b", "busy", "2/2", "1..3", "n1,n2"],
      ["c", "loading", "0/1", "0..1", ""],
    ]);
    expect(rows[0]?.blockedBy).toBe("exit 1: no such file (3 failures; next try in 5 s)");
    expect(rows[1]?.lastUsed).toBe("10 s ago");
    expect(rows[2]?.lastUsed).toBe("never");
  });

  it("says a model's load job in words on its row: waiting with the reason, loading with its phase and progress, failed with why; nothing without one", () => {
    const withJob = (model: string, loadJob: DashboardLoadJob): DashboardSnapshot["models"][number] => ({ ...cfg(model), loadJob });
    const s: DashboardSnapshot = {
      at: "",
      nodes: [],
      instances: [],
      models: [
        withJob("a", { state: "waiting", phase: "waiting_for_node", nodeId: "", reason: "gpu-1 is draining", code: "", forMs: 3_000 }),
        withJob("b", { state: "loading", phase: "pulling", nodeId: "gpu-3", reason: "", code: "", forMs: 12_000, bytesDone: 1.2 * 1024 ** 3, bytesTotal: 4.2 * 1024 ** 3, bytesPerSecond: 85 * 1024 ** 2 }),
        withJob("c", { state: "failed", phase: "", nodeId: "", reason: "no node fits", code: "UNAVAILABLE", forMs: 2_000 }),
        cfg("d"),
      ],
    };
    expect(modelRows(s, 0).map((r) => [r.model, r.jobState, r.job])).toEqual([
      ["a", "waiting", "waiting for a node: gpu-1 is draining (3s)"],
      ["b", "loading", "loading (pulling 1.2 / 4.2 GiB at 85 MiB/s) on gpu-3 (12s)"],
      ["c", "failed", "failed: no node fits (UNAVAILABLE, 2s ago)"],
      ["d", "", ""],
    ]);
  });
});
