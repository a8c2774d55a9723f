/**
 * Policy what-if replays more than calls: a node the trace recorded as lost
 * loses its instances at that time, a drained node is drained, an
 * operator's recorded policy change applies at its time (unless the
 * candidate holds that field, as a sweep's axes do), and a call's recorded
 * priority class goes through the coordinator's own admission gate.
 */
import { describe, expect, it } from "vitest";
import { AdmissionGate, resolveCoordinatorConfig } from "@warden/coordinator";
import { parsePolicyChange, parseTraceLine, replayInput, replayTrace, type ReplayConfig, type TraceLine } from "@warden/whatif";

const t0 = 1_750_000_000_000;
const min = 60_000;
const gib = 1024 ** 3;
const model = { id: "m", backend: "llama-cpp", modelFile: "m.gguf", memoryEstimate: "4GiB" };
const config = (extra: Record<string, unknown> = {}, policy: Record<string, unknown> = { idleCheck: true, idleTimeout: "15m" }): ReplayConfig => resolveCoordinatorConfig({ policy, models: [{ ...model, ...extra }] });

/** Nodes present from t0 (a join and a memory reading each) and one 1 s call to `m` a minute for `minutes`. */
function trace(nodes: readonly string[], minutes: number, more: readonly TraceLine[] = []): TraceLine[] {
  const lines: TraceLine[] = [];
  for (const n of nodes) lines.push({ t: "node", at: t0, node: n, ev: "joined" }, { t: "mem", at: t0, node: n, totalBytes: 24 * gib, usedBytes: 0 });
  lines.push({ t: "load", at: t0, m: "m", node: nodes[0] ?? "", loadMs: 20_000 });
  for (let i = 0; i < minutes; i++) lines.push({ t: "call", at: t0 + i * min, m: "m", waitMs: 0, durMs: 1_000, ok: true });
  return [...lines, ...more];
}

describe("policy what-if: the recorded timeline", () => {
  it("a node lost just before 5 min loses its instance; the call at 5 min waits for its return and a new load", async () => {
    const lines = trace(["gpu-1"], 10, [
      { t: "node", at: t0 + 5 * min - 1, node: "gpu-1", ev: "lost" },
      { t: "node", at: t0 + 5 * min + 5_000, node: "gpu-1", ev: "joined" },
    ]);
    const r = await replayTrace(replayInput(lines), config());
    expect(r.coldStarts).toBe(2);
    expect(r.failedCalls).toBe(0);
    // The call at 5 min waited for the node (back 5 s later; the wait for a node looks again
    // on its own period) and a load (20 s), within the load's wait (30 s).
    expect(r.waitP99Ms).toBeGreaterThanOrEqual(25_000);
    expect(r.waitP99Ms).toBeLessThan(30_000);
    expect(r.operatorChanges).toEqual({ applied: 3, refused: 0, kept: 0 });
    // Without the timeline the node never goes: one load serves all.
    const still = await replayTrace(replayInput(lines), config(), { timeline: false });
    expect(still.coldStarts).toBe(1);
  });

  it("a node that joins later takes no placement before it joined", async () => {
    const lines = trace(["gpu-1"], 3, [
      { t: "node", at: t0 + 2 * min, node: "gpu-2", ev: "joined" },
      { t: "mem", at: t0 + 2 * min, node: "gpu-2", totalBytes: 24 * gib, usedBytes: 0 },
      { t: "node", at: t0 + 30_000, node: "gpu-1", ev: "drain" },
    ]);
    const r = await replayTrace(replayInput(lines), config());
    // Drained at 30 s, the only other node joins at 2 min: the call at 1 min finds no node for the
    // load's wait (loadWait, 30 s) and fails; the one at 2 min loads on gpu-2.
    expect(r.evictionsByReason).toEqual({ drain: 1 });
    expect(r.failedCalls).toBe(1);
    expect(r.coldStarts).toBe(2);
    expect(r.nodes.find((n) => n.nodeId === "gpu-2")?.peakBytes).toBe(4 * gib);
  });

  it("a drain at 5 min moves the model to the other node; an undrain lets placement use it again", async () => {
    const lines = trace(["gpu-1", "gpu-2"], 10, [
      { t: "node", at: t0 + 5 * min - 1, node: "gpu-1", ev: "drain" },
      { t: "node", at: t0 + 6 * min, node: "gpu-1", ev: "undrain" },
    ]);
    const r = await replayTrace(replayInput(lines), config());
    expect(r.evictionsByReason).toEqual({ drain: 1 });
    expect(r.coldStarts).toBe(2);
    expect(r.failedCalls).toBe(0);
    // Both nodes held the model, one after the other.
    expect(r.nodes.map((n) => n.peakBytes)).toEqual([4 * gib, 4 * gib]);
    const still = await replayTrace(replayInput(lines), config(), { timeline: false });
    expect(still.evictionsByReason).toEqual({});
  });

  it("a drain's stop takes its recorded time: a call just after it loads on the other node, as the real cluster did", async () => {
    // gpu-1 drained 200 ms before the call at 5 min; its stop took 50 ms; it is undrained 500 ms after the call.
    const around = (stop: TraceLine): TraceLine[] => trace(["gpu-1", "gpu-2"], 8, [
      { t: "node", at: t0 + 5 * min - 200, node: "gpu-1", ev: "drain" },
      stop,
      { t: "node", at: t0 + 5 * min + 500, node: "gpu-1", ev: "undrain" },
    ]);
    const recorded = replayInput(around({ t: "stop", at: t0 + 5 * min - 150, m: "m", node: "gpu-1", reason: "drain", stopMs: 50 }));
    expect(recorded.stopMs.get("m")).toBe(50);
    const r = await replayTrace(recorded, config());
    expect(r.coldStarts).toBe(2);
    expect(r.nodes.find((n) => n.nodeId === "gpu-2")?.peakBytes).toBe(4 * gib);
    // An older trace's stop line has no time: the replay's default (1 s) outlasts the drain, the call
    // waits for that stop, and by then gpu-1 is undrained and takes the model again.
    const unmeasured = replayInput(around({ t: "stop", at: t0 + 5 * min - 150, m: "m", node: "gpu-1", reason: "drain" }));
    expect(unmeasured.stopMs.size).toBe(0);
    const d = await replayTrace(unmeasured, config());
    expect(d.nodes.find((n) => n.nodeId === "gpu-2")?.peakBytes).toBe(0);
    // The field from outside is bounded like every duration.
    expect(() => parseTraceLine(JSON.stringify({ t: "stop", at: t0, m: "m", node: "gpu-1", reason: "drain", stopMs: -1 }), 3)).toThrow(/trace:3\.stopMs/);
  });

  it("an operator's recorded idle-timeout change applies at its time; a candidate holding the field keeps its own", async () => {
    const lines: TraceLine[] = trace(["gpu-1"], 0, [{ t: "admin", at: t0 + 1_000, op: "policy", changes: ["idleTimeoutMs=60000"] }]);
    for (let i = 0; i < 5; i++) lines.push({ t: "call", at: t0 + i * 5 * min, m: "m", waitMs: 0, durMs: 1_000, ok: true });
    const r = await replayTrace(replayInput(lines), config());
    expect(r.evictionsByReason).toEqual({ idle: 4 });
    expect(r.coldStarts).toBe(5);
    const held = await replayTrace(replayInput(lines), config(), { keepPolicyFields: new Set(["idleTimeout"]) });
    expect(held.evictionsByReason).toEqual({});
    expect(held.operatorChanges).toEqual({ applied: 2, refused: 0, kept: 1 });
  });

  it("a recorded scale change and an operator's unload replay at their times; a change for a model the candidate lacks is refused", async () => {
    const lines = trace(["gpu-1", "gpu-2"], 10, [
      { t: "admin", at: t0 + 2 * min, op: "scale", m: "m", min: 2, max: 2 },
      { t: "admin", at: t0 + 3 * min, op: "scale", m: "gone", min: 1, max: 1 },
      { t: "stop", at: t0 + 8 * min + 30_000, m: "m", node: "gpu-1", reason: "admin" },
    ]);
    const r = await replayTrace(replayInput(lines), config({ replicas: { min: 0, max: 2 } }));
    // The second replica is the scale-up's load; the unload at 8.5 min stops one, and the
    // reconciler loads it again to keep the minimum of 2.
    expect(r.coldStarts).toBe(3);
    expect(r.nodes.map((n) => n.peakBytes)).toEqual([4 * gib, 4 * gib]);
    expect(r.operatorChanges).toEqual({ applied: 4, refused: 1, kept: 0 });
    expect(r.evictionsByReason).toEqual({ admin: 1 });
  });

  it("calls go through the admission gate at their recorded class: of four at once, sheddable lose two, critical one", async () => {
    const burst = (cls: "critical" | "sheddable"): TraceLine[] => {
      const lines = trace(["gpu-1"], 0);
      for (let i = 0; i < 4; i++) lines.push({ t: "call", at: t0 + 1_000, m: "m", waitMs: 0, durMs: 10_000, ok: true, cls });
      return lines;
    };
    const c = config({ replicas: { targetInFlight: 1 }, admission: { maxInFlightPerReplica: 1, shedAtQueued: 1, maxQueued: 2 } });
    const gate = { admissionGate: (p: ConstructorParameters<typeof AdmissionGate>[0]) => new AdmissionGate(p) };
    expect((await replayTrace(replayInput(burst("sheddable")), c, gate)).failedCalls).toBe(2);
    expect((await replayTrace(replayInput(burst("critical")), c, gate)).failedCalls).toBe(1);
    // Without the gate every call is served.
    expect((await replayTrace(replayInput(burst("sheddable")), c)).failedCalls).toBe(0);
  });

  it("trace lines from outside: a bad class, node event, change list, limit or gap is refused naming the field", () => {
    const line = (o: Record<string, unknown>): string => JSON.stringify({ at: t0, ...o });
    expect(() => parseTraceLine(line({ t: "call", m: "m", waitMs: 0, durMs: 0, ok: true, cls: "vip" }), 3)).toThrow(/trace:3\.cls/);
    expect(() => parseTraceLine(line({ t: "call", m: "m", waitMs: 0, durMs: 0, ok: true, reqBytes: -1 }), 3)).toThrow(/trace:3\.reqBytes/);
    expect(() => parseTraceLine(line({ t: "node", node: "n", ev: "exploded" }), 4)).toThrow(/trace:4\.ev/);
    expect(() => parseTraceLine(line({ t: "admin", op: "policy", changes: Array.from({ length: 65 }, () => "a=1") }), 5)).toThrow(/trace:5\.changes/);
    expect(() => parseTraceLine(line({ t: "admin", op: "limits", node: "n", budgetPercent: 101 }), 6)).toThrow(/trace:6\.budgetPercent/);
    expect(() => parseTraceLine(line({ t: "gap", lastAt: t0 }), 7)).toThrow(/trace:7\.dropped/);
    expect(parseTraceLine(line({ t: "gap", lastAt: t0 + 5, dropped: 3 }), 7)).toEqual({ t: "gap", at: t0, lastAt: t0 + 5, dropped: 3 });
    expect(parseTraceLine(line({ t: "call", m: "m", waitMs: 1, durMs: 2, ok: true, cls: "sheddable", reqBytes: 10, respBytes: 20 }), 1)).toEqual({ t: "call", at: t0, m: "m", waitMs: 1, durMs: 2, ok: true, cls: "sheddable", reqBytes: 10, respBytes: 20 });
    expect(parsePolicyChange("idleTimeoutMs=60000")).toEqual({ t: "field", field: "idleTimeoutMs", value: 60000 });
    expect(parsePolicyChange("models.chat pinned=true groups=[a,b]")).toEqual({ t: "model", model: "chat", pinned: true, groups: ["a", "b"] });
    expect(parsePolicyChange("nonsense")).toBeUndefined();
  });
});
