import { describe, expect, it } from "vitest";
import { modelRows } from "./models-view.js";
import type { DashboardInstance, DashboardSnapshot } from "./dashboard-view.js";

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
});
