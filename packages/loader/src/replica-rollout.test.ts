import { describe, expect, it } from "vitest";
import { loadRevision, modelSpec } from "./model-spec.js";
import type { HeldInstance } from "./loader-types.js";
import { ReplicaIndex } from "./replica-index.js";
import { rolloutWanted } from "./replica-not-needed.js";
import { decideReplicas, rolloutKeep, type ReplicaView } from "./replica-reconciler.js";
import { readyReplicas, replicaHarness, replicaModels, twoReplicas } from "./replica-test-kit.js";

// Two ready replicas, both started with the old settings and idle; the rollout keeps 2.
const rolling: ReplicaView = {
  min: 2,
  max: 2,
  stopping: 0,
  scaleDownAfterMs: 300_000,
  live: 2,
  ready: 2,
  loadInFlight: false,
  breakerAllows: true,
  idle: [
    { incarnation: "a", idleSinceMs: 9_000 },
    { incarnation: "b", idleSinceMs: 8_000 },
  ],
  nowMs: 10_000,
  rollout: {
    keep: 2,
    staleIdle: [
      { incarnation: "a", idleSinceMs: 9_000 },
      { incarnation: "b", idleSinceMs: 8_000 },
    ],
    freshReady: 0,
  },
};

describe("loadRevision", () => {
  it("changes with what reaches StartBackend and LoadModel, not with replica, group or idle settings", () => {
    const a = modelSpec({ id: "m", backend: "llama-cpp", options: ["x"], load: { threads: 2 } });
    expect(loadRevision(modelSpec({ ...a }))).toBe(loadRevision(a));
    expect(loadRevision({ ...a, load: { threads: 2, batch: undefined } })).toBe(loadRevision(a));
    for (const changed of [{ options: ["y"] }, { backend: "whisper" }, { modelFile: "f" }, { contextSize: 8 }, { load: { threads: 3 } }, { load: { threads: 2, backendModel: "b" } }]) {
      expect(loadRevision({ ...a, ...changed })).not.toBe(loadRevision(a));
    }
    for (const same of [{ replicas: { min: 1, max: 3, targetInFlight: 1, scaleDownAfterMs: 1 } }, { groups: ["g"] }, { pinned: true }, { idleTimeoutMs: 5 }, { sizeBytes: 9 }]) {
      expect(loadRevision({ ...a, ...same })).toBe(loadRevision(a));
    }
  });
});

describe("a rollout decision", () => {
  it("starts one replacement beside the stale replicas, bounded at keep + 1", () => {
    expect(decideReplicas(rolling)).toEqual({ t: "rollout-load", upTo: 3 });
  });

  it("waits while the replacement loads, or while the breaker is open (the stale replicas keep serving)", () => {
    expect(decideReplicas({ ...rolling, live: 3, loadInFlight: true })).toEqual({ t: "none" });
    expect(decideReplicas({ ...rolling, breakerAllows: false })).toEqual({ t: "none" });
    expect(decideReplicas({ ...rolling, stopping: 1 })).toEqual({ t: "none" });
  });

  it("once the replacement is ready stops the stale replica idle longest, never a busy one", () => {
    const up = { ...rolling, live: 3, ready: 3, rollout: { ...rolling.rollout!, freshReady: 1 } };
    expect(decideReplicas(up)).toEqual({ t: "rollout-stop", incarnation: "b" });
    expect(decideReplicas({ ...up, rollout: { ...up.rollout, staleIdle: [] } })).toEqual({ t: "none" });
    // the third one still loading (not ready): wait for it
    expect(decideReplicas({ ...up, ready: 2, rollout: { ...up.rollout, freshReady: 0 } })).toEqual({ t: "none" });
    // all ready, none current, more than keep (a lowered max lowered keep): a stale one goes without a replacement
    expect(decideReplicas({ ...up, rollout: { ...up.rollout, freshReady: 0 } })).toEqual({ t: "rollout-stop", incarnation: "b" });
  });

  it("keeps the live count it began with, never below min (sim seed 8: began with the floor half restored) nor above max", () => {
    expect(rolloutKeep(undefined, 3, 0, 4)).toBe(3);
    expect(rolloutKeep(3, 4, 0, 4)).toBe(3); // its own surge does not raise it
    expect(rolloutKeep(undefined, 1, 2, 4)).toBe(2);
    expect(rolloutKeep(3, 3, 0, 2)).toBe(2); // max lowered meanwhile
    expect(rolloutKeep(undefined, 0, 0, 1)).toBe(1);
  });

  it("a single on-demand instance (min 0, max 1) is replaced the same way, beside it", () => {
    const one: ReplicaView = { ...rolling, min: 0, max: 1, live: 1, ready: 1, idle: [{ incarnation: "a", idleSinceMs: 9_000 }], rollout: { keep: 1, staleIdle: [{ incarnation: "a", idleSinceMs: 9_000 }], freshReady: 0 } };
    expect(decideReplicas(one)).toEqual({ t: "rollout-load", upTo: 2 });
  });
});

describe("a rollout's replacement waiting in admission", () => {
  it("is wanted only while the config still says its settings and a replica with others runs", () => {
    const v1 = modelSpec({ id: "m", backend: "sim" });
    const v2 = { ...v1, options: ["rev:2"] };
    const replicas = new ReplicaIndex();
    replicas.add("m", "a");
    const heldAs = (spec: typeof v1): HeldInstance => ({ incarnation: "a", model: "m", nodeId: "n1", spec, placement: "local", phase: "ready", address: "x", backend: undefined, gpu: undefined, startedAtMs: 0 });
    const held = new Map([["a", heldAs(v1)]]);
    const s = (current: typeof v1) => ({ models: new Map([["m", current]]), replicas, held });
    expect(rolloutWanted(s(v2), v2)).toBe(true);
    // the reload was reverted while it waited: "a" is current again
    expect(rolloutWanted(s(v1), v2)).toBe(false);
    // a third config replaced the one it loads
    expect(rolloutWanted(s({ ...v1, options: ["rev:3"] }), v2)).toBe(false);
    // no stale replica left (stopped or gone meanwhile)
    held.set("a", heldAs(v2));
    expect(rolloutWanted(s(v2), v2)).toBe(false);
  });
});

describe("a config reload that changes the load settings", () => {
  it("replaces the replicas one at a time, the new one ready before the old one stops, audited as a rollout", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    const old = await twoReplicas(h);
    h.loader.startTicking();
    const next = replicaModels({ min: 0, max: 2, targetInFlight: 1 }, { options: ["rev:2"] });
    await Promise.all(h.loader.setModels(next));
    let fewest = readyReplicas(h).length;
    await h.until(() => {
      fewest = Math.min(fewest, readyReplicas(h).length);
      const now = readyReplicas(h);
      return now.length === 2 && !now.some((i) => old.includes(i)) && h.loader.replicaStatus("m1")?.stopping === 0;
    });
    expect(fewest).toBe(2);
    const ups = h.events.ofType("replica.scaled-up").filter((e) => e.cause === "rollout");
    expect(ups).toHaveLength(2);
    const stops = h.events.ofType("eviction.stopped").filter((e) => e.reason === "rollout");
    expect(stops.map((e) => e.incarnation).sort()).toEqual([...old].sort());
    // each stale stop came after its replacement was loaded
    const order = h.events.list.filter((e) => (e.type === "backend.loaded" && ups.some((u) => u.incarnation === e.incarnation)) || (e.type === "eviction.started" && e.reason === "rollout")).map((e) => e.type);
    expect(order).toEqual(["backend.loaded", "eviction.started", "backend.loaded", "eviction.started"]);
    const starts = [...h.n1.starts, ...h.n2.starts].filter((s) => readyReplicas(h).includes(s.request.incarnation));
    expect(starts.map((s) => s.request.options)).toEqual([["rev:2"], ["rev:2"]]);
  });

  it("a reload that changes only replica settings or groups rolls nothing", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    const old = await twoReplicas(h);
    h.loader.startTicking();
    await Promise.all(h.loader.setModels(replicaModels({ min: 0, max: 3, targetInFlight: 1 }, { groups: ["g"] })));
    await h.run(60_000);
    expect(readyReplicas(h).sort()).toEqual([...old].sort());
    expect(h.events.ofType("replica.scaled-up").filter((e) => e.cause === "rollout")).toEqual([]);
  });

  it("replicas started from a backend bundle their node no longer names are replaced the same way, one at a time", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    const old = await twoReplicas(h);
    h.loader.startTicking();
    await h.run(60_000);
    expect(readyReplicas(h).sort()).toEqual([...old].sort()); // nothing stale yet
    for (const inc of old) h.directory.oldBundle.add(inc);
    for (const n of ["n1", "n2"]) h.loader.bundlesChanged(n);
    let fewest = readyReplicas(h).length;
    await h.until(() => {
      fewest = Math.min(fewest, readyReplicas(h).length);
      const now = readyReplicas(h);
      return now.length === 2 && !now.some((i) => old.includes(i)) && h.loader.replicaStatus("m1")?.stopping === 0;
    });
    expect(fewest).toBe(2);
    expect(h.events.ofType("replica.scaled-up").filter((e) => e.cause === "rollout")).toHaveLength(2);
    expect(h.events.ofType("eviction.stopped").filter((e) => e.reason === "rollout").map((e) => e.incarnation).sort()).toEqual([...old].sort());
    await h.run(60_000);
    expect(h.events.ofType("rollout.finished")).toHaveLength(1);
  });
});
