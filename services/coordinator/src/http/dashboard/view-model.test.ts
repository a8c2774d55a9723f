import { describe, expect, it } from "vitest";
import type { DashboardInstance, DashboardNode, DashboardSnapshot } from "./dashboard-view.js";
import { ago, appendBounded, eventLine, explainCounts, formatBytes, formatRate, instanceKind, kindStyles, loadJobText, memoryBar, nodeCards } from "./view-model.js";
import { parseSse } from "./sse-parse.js";

const gib = 1024 ** 3;

function node(over: Partial<DashboardNode> = {}): DashboardNode {
  return { nodeId: "n1", address: "10.0.0.1:9000", state: "ready", draining: false, drainRemaining: 0, embedded: false, version: "0.2.0", labels: {}, gpus: [], ramTotalBytes: 0, ramUsedBytes: 0, accountedBytes: 0, foreign: [], lastHeartbeatAt: "", instanceCount: 0, ...over };
}

function inst(over: Partial<DashboardInstance> = {}): DashboardInstance {
  return { model: "m", nodeId: "n1", incarnation: "inc-1", address: "127.0.0.1:21000", state: "ready", inFlight: 0, lastUsedAt: "", busySince: "", sizeBytes: gib, pinned: false, groups: [], backend: "backend-sim", nodeState: "ready", ...over };
}

describe("instance kinds and colours", () => {
  it("a ready instance with requests in flight is busy; every other state is its own kind", () => {
    expect(instanceKind(inst({ state: "ready", inFlight: 0 }))).toBe("ready");
    expect(instanceKind(inst({ state: "ready", inFlight: 3 }))).toBe("busy");
    for (const s of ["loading", "pending-eviction", "leftover", "orphan", "freed"] as const) expect(instanceKind(inst({ state: s, inFlight: 2 }))).toBe(s);
  });

  it("the seven kinds the legend shows have distinct colours", () => {
    const shown = ["loading", "ready", "busy", "pending-eviction", "leftover", "orphan", "foreign"] as const;
    expect(new Set(shown.map((k) => kindStyles[k].colour)).size).toBe(shown.length);
  });
});

describe("memory bars", () => {
  it("sums GPUs, and shows drift between the agent's measure and Warden's accounting", () => {
    const b = memoryBar(node({ gpus: [{ index: 0, name: "A", totalBytes: 8 * gib, usedBytes: 3 * gib }, { index: 1, name: "A", totalBytes: 8 * gib, usedBytes: 1 * gib }], accountedBytes: 2 * gib }));
    expect(b).toEqual({ source: "gpu", totalBytes: 16 * gib, measuredBytes: 4 * gib, accountedBytes: 2 * gib, driftBytes: 2 * gib, measuredPct: 25, accountedPct: 12.5 });
  });

  it("falls back to RAM without GPUs, clamps past 100% and is empty when nothing is reported", () => {
    expect(memoryBar(node({ ramTotalBytes: 4 * gib, ramUsedBytes: 1 * gib, accountedBytes: 6 * gib }))).toMatchObject({ source: "ram", measuredPct: 25, accountedPct: 100, driftBytes: -5 * gib });
    expect(memoryBar(node({ accountedBytes: gib }))).toMatchObject({ source: "none", totalBytes: 0, measuredPct: 0, accountedPct: 0 });
  });
});

describe("node cards", () => {
  const now = Date.parse("2026-01-01T00:01:00Z");
  const snap: DashboardSnapshot = {
    at: "2026-01-01T00:01:00Z",
    nodes: [node({ nodeId: "b", draining: true, drainRemaining: 1, foreign: [{ pid: 77, address: "127.0.0.1:21005", detail: "no Warden mark" }] }), node({ nodeId: "a", embedded: true })],
    instances: [
      inst({ nodeId: "b", model: "zeta", incarnation: "i2", state: "leftover", leftover: { attempts: 3, lastError: "refused", stuck: true } }),
      inst({ nodeId: "b", model: "alpha", incarnation: "i1", inFlight: 2, lastUsedAt: "2026-01-01T00:00:50Z", groups: ["g"] }),
      inst({ nodeId: "a", model: "orph", incarnation: "pid:12", state: "orphan", sizeBytes: 0 }),
      inst({ nodeId: "gone", model: "x", incarnation: "i9" }),
    ],
    models: [],
  };

  it("one card per node in id order, rows by model, foreign processes last, instances of unknown nodes left out", () => {
    const cards = nodeCards(snap, now);
    expect(cards.map((c) => c.nodeId)).toEqual(["a", "b"]);
    expect(cards[0]?.status).toBe("ready · embedded");
    expect(cards[1]?.status).toBe("ready · draining (1 left)");
    expect(cards[1]?.rows.map((r) => [r.key, r.kind])).toEqual([["i1", "busy"], ["i2", "leftover"], ["pid:77", "foreign"]]);
    expect(cards[1]?.rows[0]).toMatchObject({ lastUsed: "10 s ago", inFlight: 2, detail: "127.0.0.1:21000 · groups g" });
    expect(cards[1]?.rows[1]?.detail).toContain("stop attempts 3 (stuck): refused");
    expect(cards[1]?.rows[2]?.detail).toBe("127.0.0.1:21005 · no Warden mark");
    expect(cards[0]?.rows.map((r) => r.kind)).toEqual(["orphan"]);
  });
});

describe("serving through an agent outage", () => {
  it("an instance of an unreachable node says whether it serves on or its health probe failed", () => {
    const snap: DashboardSnapshot = {
      at: "2026-01-01T00:01:00Z",
      nodes: [node({ state: "unreachable" })],
      instances: [inst({ incarnation: "i1", nodeState: "unreachable", outage: "serving" }), inst({ incarnation: "i2", nodeState: "unreachable", outage: "probe failed" }), inst({ incarnation: "i3", nodeState: "unreachable" })],
      models: [],
    };
    expect(nodeCards(snap, Date.parse(snap.at))[0]?.rows.map((r) => r.detail)).toEqual(["127.0.0.1:21000 · serving, agent unreachable", "127.0.0.1:21000 · agent unreachable, health probe failed", "127.0.0.1:21000 · node unreachable"]);
  });
});

describe("event lines", () => {
  it("spells out the eviction lifecycle with reason, trigger and outcome", () => {
    const started = eventLine({ type: "eviction.started", id: "1", time: "t", model: "a", nodeId: "local", evictionStarted: { reason: "EVICTION_REASON_GROUP", trigger: "load of b", wasBusy: true } });
    expect(started).toEqual({ id: "1", time: "t", type: "eviction.started", tone: "warn", text: "eviction started a on local: reason group (load of b), was busy" });
    expect(eventLine({ type: "eviction.stopped", model: "a", nodeId: "local", evictionStopped: { reason: "EVICTION_REASON_GROUP", alreadyGone: true } })).toMatchObject({ tone: "ok", text: "eviction stopped a on local: reason group, already gone" });
    expect(eventLine({ type: "eviction.failed", model: "a", evictionFailed: { reason: "EVICTION_REASON_LRU", outcome: "EVICTION_FAILED_OUTCOME_LEFTOVER", error: "agent unreachable" } })).toMatchObject({ tone: "error", text: "eviction failed a: reason lru, outcome leftover — agent unreachable" });
  });

  it("load jobs: load.waiting and load.failed lines, and a model's job as models ls says it", () => {
    expect(eventLine({ type: "load.waiting", model: "m", loadWaiting: { reason: "no node fits: n1: node is draining" } })).toMatchObject({ tone: "warn", text: "load waiting m: no node fits: n1: node is draining" });
    expect(eventLine({ type: "load.failed", model: "m", loadFailed: { code: "UNAVAILABLE", reason: "cannot load now" } })).toMatchObject({ tone: "error", text: "load failed m (UNAVAILABLE): cannot load now" });
    expect(loadJobText("m", { state: "waiting", phase: "waiting_for_node", nodeId: "", reason: "node is draining", code: "", forMs: 12_400 })).toBe("m: waiting for a node: node is draining (12s)");
    expect(loadJobText("m", { state: "waiting", phase: "waiting_for_recovery", nodeId: "", reason: "the coordinator's recovery window", code: "", forMs: 2_000 })).toBe("m: waiting for the recovery window: the coordinator's recovery window (2s)");
    expect(loadJobText("m", { state: "loading", phase: "starting", nodeId: "n1", reason: "", code: "", forMs: 0 })).toBe("m: loading (starting) on n1 (0s)");
    expect(loadJobText("m", { state: "loading", phase: "loading", nodeId: "n1", reason: "", code: "", forMs: 0 })).toBe("m: loading on n1 (0s)");
  });

  it("a pulling job shows bytes fetched of all, in the total's unit, and the rate", () => {
    const pulling = { state: "loading", phase: "pulling", nodeId: "gpu-3", reason: "", code: "", forMs: 12_000 } as const;
    expect(loadJobText("m", { ...pulling, bytesDone: 1.2 * gib, bytesTotal: 4.2 * gib, bytesPerSecond: 85 * 1024 ** 2 })).toBe("m: loading (pulling 1.2 / 4.2 GiB at 85 MiB/s) on gpu-3 (12s)");
    expect(loadJobText("m", { ...pulling, bytesDone: 500_000, bytesTotal: 2_000_000, bytesPerSecond: 1536 })).toBe("m: loading (pulling 0.5 / 1.9 MiB at 1.5 KiB/s) on gpu-3 (12s)");
    // No rate yet in the pull's first moment; the hash check after the last byte; a job that reports no bytes (or an older coordinator's).
    expect(loadJobText("m", { ...pulling, bytesDone: 0, bytesTotal: 4.2 * gib, bytesPerSecond: 0 })).toBe("m: loading (pulling 0.0 / 4.2 GiB) on gpu-3 (12s)");
    expect(loadJobText("m", { ...pulling, phase: "verifying", bytesDone: 4.2 * gib, bytesTotal: 4.2 * gib, bytesPerSecond: 0 })).toBe("m: loading (verifying 4.2 / 4.2 GiB) on gpu-3 (12s)");
    expect(loadJobText("m", { ...pulling, bytesDone: 0, bytesTotal: 0, bytesPerSecond: 0 })).toBe("m: loading (pulling) on gpu-3 (12s)");
    expect(loadJobText("m", pulling)).toBe("m: loading (pulling) on gpu-3 (12s)");
    expect([formatRate(0), formatRate(900), formatRate(1536), formatRate(85 * 1024 ** 2), formatRate(1.25 * gib)]).toEqual(["0 B/s", "900 B/s", "1.5 KiB/s", "85 MiB/s", "1.3 GiB/s"]);
  });

  it("summarises other types and survives a payload of the wrong shape", () => {
    expect(eventLine({ type: "backend.loaded", model: "b", nodeId: "n", backendLoaded: { loadDurationMs: "412" } }).text).toBe("loaded b on n in 412 ms");
    expect(eventLine({ type: "node.lost", nodeId: "n" })).toMatchObject({ tone: "warn", text: "node.lost n" });
    expect(eventLine({ type: "eviction.started", evictionStarted: "garbage" }).text).toBe("eviction started: reason ");
  });

  it("the log keeps only the newest lines", () => {
    let l: number[] = [];
    for (let i = 0; i < 7; i++) l = appendBounded(l, i, 3);
    expect(l).toEqual([4, 5, 6]);
  });
});

describe("formatting", () => {
  it("bytes and ages", () => {
    expect([formatBytes(0), formatBytes(1536), formatBytes(-2 * gib), formatBytes(300 * 1024 ** 2)]).toEqual(["0 B", "1.5 KiB", "-2.0 GiB", "300 MiB"]);
    const now = Date.parse("2026-01-01T02:00:00Z");
    expect([ago("", now), ago("2026-01-01T01:59:59Z", now), ago("2026-01-01T01:55:00Z", now), ago("2026-01-01T00:00:00Z", now), ago("nope", now)]).toEqual(["never", "1 s ago", "5 min ago", "2 h ago", "?"]);
  });
});

describe("SSE parsing", () => {
  it("splits frames across chunks, skips comments, joins multi-line data", () => {
    const a = parseSse("event: snapshot\ndata: {\"a\":1}\n\n: keep-alive\n\nevent: event\ndata: x");
    expect(a.messages).toEqual([{ event: "snapshot", data: "{\"a\":1}" }]);
    const b = parseSse(`${a.rest}\ndata: y\n\ndata: plain\n\n`);
    expect(b.messages).toEqual([{ event: "event", data: "x\ny" }, { event: "message", data: "plain" }]);
    expect(b.rest).toBe("");
  });
});

describe("Explain's counts", () => {
  it("a page of a larger cluster says how much it lists; a whole one says how many nodes; none weighed (at max replicas, no node) says nothing", () => {
    const nodes = (n: number): unknown[] => Array.from({ length: n }, () => ({}));
    expect(explainCounts({ nodes: nodes(100), nodesTotal: 250, nodesFit: 84, nodesFitAfterEviction: 83 })).toBe("100 of 250 nodes listed · 84 fit now, 83 after eviction");
    expect(explainCounts({ nodes: nodes(1), nodesTotal: 1, nodesFit: 0, nodesFitAfterEviction: 1 })).toBe("1 node · 0 fit now, 1 after eviction");
    expect(explainCounts({ nodes: nodes(3), nodesTotal: 3, nodesFit: 2, nodesFitAfterEviction: 0 })).toBe("3 nodes · 2 fit now, 0 after eviction");
    expect(explainCounts({ nodes: [], nodesTotal: 0, nodesFit: 0, nodesFitAfterEviction: 0 })).toBe("");
  });
});
