import { describe, expect, it } from "vitest";
import { ManualClock } from "@warden/common";
import { MetricsRing, maxMetricsGpusPerNode, maxMetricsModels, type NodeMemorySample, type QueueSample } from "./metrics-ring.js";

describe("MetricsRing", () => {
  it("samples calls/s, p50/p99 and in-flight per model and memory per node, keeps the last `capacity` samples", () => {
    const clock = new ManualClock();
    let nodes = [{ nodeId: "a", measuredBytes: 10, accountedBytes: 8 }];
    const ring = new MetricsRing(clock, () => nodes, { capacity: 3, sampleMs: 1_000 });
    ring.onCall({ model: "m", incarnation: "i1", nodeId: "a", inFlight: 1 });
    for (let i = 0; i < 99; i++) ring.onCall({ model: "m", incarnation: "i1", nodeId: "a", inFlight: 1, durationMs: 10 });
    ring.onCall({ model: "m", incarnation: "i1", nodeId: "a", inFlight: 1, durationMs: 5_000 });
    ring.sample();
    let j = ring.toJson();
    expect(j.times.length).toBe(1);
    const m = j.models[0];
    expect(m?.callsPerS).toEqual([100]);
    // Within a bucket (15 %) of the true figures: 10 ms and 5 s.
    expect(m?.p50Ms[0]).toBeGreaterThanOrEqual(10);
    expect(m?.p50Ms[0]).toBeLessThanOrEqual(12);
    expect(m?.p99Ms[0]).toBeLessThanOrEqual(12);
    expect(m?.inFlight).toEqual([1]);
    expect(j.nodes).toEqual([{ nodeId: "a", measuredBytes: [10], accountedBytes: [8], gpus: [] }]);
    // No calls: rate 0, no latency; a node gone: no value at that sample.
    ring.onCall({ model: "m", incarnation: "i1", nodeId: "a", inFlight: 0, durationMs: 5_000 });
    nodes = [];
    ring.sample();
    ring.sample();
    ring.sample();
    j = ring.toJson();
    expect(j.times.length).toBe(3);
    expect(j.models[0]?.callsPerS).toEqual([1, 0, 0]);
    expect(j.models[0]?.p50Ms).toEqual([j.models[0]?.p99Ms[0], null, null]);
    expect(j.models[0]?.inFlight).toEqual([0, 0, 0]);
    expect(j.nodes[0]?.measuredBytes).toEqual([null, null, null]);
  });

  it("samples tokens/s and the admission queue per model, and each GPU's used memory beside its node's", () => {
    const clock = new ManualClock();
    let nodes: NodeMemorySample[] = [{ nodeId: "a", measuredBytes: 30, accountedBytes: 20, gpus: [{ index: 0, usedBytes: 10, totalBytes: 100 }, { index: 1, usedBytes: 20, totalBytes: 100 }] }];
    let queues: QueueSample[] = [{ model: "q", waiting: 3 }];
    const ring = new MetricsRing(clock, () => nodes, { capacity: 4, sampleMs: 2_000 }, () => queues);
    ring.onTokens("m", 50);
    ring.onTokens("m", 30);
    // Not a count of tokens: ignored, never NaN in the ring.
    ring.onTokens("m", Number.NaN);
    ring.onTokens("m", -5);
    ring.sample();
    let j = ring.toJson();
    // A model first seen waiting in its queue gets its series (before any call ended).
    expect(j.models.map((m) => [m.model, m.tokensPerS, m.queued])).toEqual([["m", [40], [0]], ["q", [0], [3]]]);
    expect(j.nodes[0]?.gpus).toEqual([{ index: 0, totalBytes: 100, usedBytes: [10] }, { index: 1, totalBytes: 100, usedBytes: [20] }]);
    // The queue drained, no tokens; GPU 1 not reported: no value at that sample.
    queues = [];
    nodes = [{ nodeId: "a", measuredBytes: 15, accountedBytes: 20, gpus: [{ index: 0, usedBytes: 15, totalBytes: 100 }] }];
    ring.sample();
    j = ring.toJson();
    expect(j.models.map((m) => [m.tokensPerS, m.queued])).toEqual([[[40, 0], [0, 0]], [[0, 0], [3, 0]]]);
    expect(j.nodes[0]?.gpus.map((g) => g.usedBytes)).toEqual([[10, 15], [20, null]]);
  });

  it("keeps at most 8 GPUs a node and counts the rest", () => {
    const gpus = Array.from({ length: maxMetricsGpusPerNode + 2 }, (_, i) => ({ index: i, usedBytes: 1, totalBytes: 2 }));
    const ring = new MetricsRing(new ManualClock(), () => [{ nodeId: "a", measuredBytes: 1, accountedBytes: 1, gpus }], { capacity: 2 });
    ring.sample();
    ring.sample();
    const j = ring.toJson();
    expect(j.nodes[0]?.gpus.length).toBe(maxMetricsGpusPerNode);
    expect(j.leftOut.gpus).toBe(2);
  });

  it("keeps at most 64 models and counts the rest", () => {
    const ring = new MetricsRing(new ManualClock(), () => [], { capacity: 2 });
    for (let i = 0; i < maxMetricsModels + 5; i++) ring.onCall({ model: `m${String(i)}`, incarnation: "x", nodeId: "a", inFlight: 0, durationMs: 1 });
    ring.sample();
    const j = ring.toJson();
    expect(j.models.length).toBe(maxMetricsModels);
    expect(j.leftOut.models).toBe(5);
  });

  it("start() samples at once, so the time axis begins with the coordinator; then one sample each sampleMs until stop()", () => {
    const clock = new ManualClock();
    const ring = new MetricsRing(clock, () => [], { capacity: 10, sampleMs: 1_000 }).start();
    const t0 = clock.wallNow();
    expect(ring.toJson().times).toEqual([t0]);
    clock.advance(999);
    expect(ring.toJson().times.length).toBe(1);
    clock.advance(1);
    clock.advance(1_000);
    expect(ring.toJson().times).toEqual([t0, t0 + 1_000, t0 + 2_000]);
    ring.start();
    expect(ring.toJson().times.length).toBe(3);
    ring.stop();
    clock.advance(5_000);
    expect(ring.toJson().times.length).toBe(3);
  });
});
