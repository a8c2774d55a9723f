import { describe, expect, it } from "vitest";
import { loadDigest } from "./load-digest.js";
import { modelSpec } from "./model-spec.js";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";

// A coordinator restarted (or a new HA leader) adopts running instances from the nodes' inventories.
// Each inventory entry carries the load digest its start was sent with: an instance started with
// other load settings than the config's now is stale, and the rollout goes on — instead of old-config
// replicas running for good because the new leader took them for current.

describe("an adopted instance's load digest", () => {
  it("differs from the config's: the instance is stale, a rollout replaces it (new ready before the old stops)", async () => {
    const h = replicaHarness({ min: 1, max: 1, targetInFlight: 1 });
    const spec = h.loader.modelSpec("m1")!;
    const before = loadDigest(modelSpec({ ...spec, options: ["rev:1"] }));
    expect(before).not.toBe(loadDigest(spec));
    expect(h.loader.adoptRemoteOnly(spec, "n2", "10.0.0.2:5000", "OLD", "inventory", before)).toBe(true);
    h.loader.startTicking();
    await h.until(() => h.events.ofType("rollout.finished").length === 1);
    expect(h.events.ofType("rollout.started").map((e) => [e.stale, e.keep])).toEqual([[1, 1]]);
    const loaded = h.events.list.findIndex((e) => e.type === "backend.loaded");
    const stop = h.events.list.findIndex((e) => e.type === "eviction.started" && e.incarnation === "OLD");
    expect(loaded).toBeGreaterThanOrEqual(0);
    expect(stop).toBeGreaterThan(loaded);
    expect(h.events.ofType("eviction.stopped").map((e) => [e.incarnation, e.reason])).toEqual([["OLD", "rollout"]]);
    expect(readyReplicas(h)).toHaveLength(1);
    expect(h.n1.starts.map((s) => s.request.loadDigest)).toEqual([loadDigest(spec)]);
    h.loader.close();
  });

  it("equal to the config's, or not reported (an agent that does not say): the instance is current, nothing rolls", async () => {
    const h = replicaHarness({ min: 2, max: 2, targetInFlight: 1 });
    const spec = h.loader.modelSpec("m1")!;
    h.directory.agents.set("n3", h.n2);
    expect(h.loader.adoptRemoteOnly(spec, "n2", "10.0.0.2:5000", "A", "inventory", loadDigest(spec))).toBe(true);
    expect(h.loader.adoptRemoteOnly(spec, "n3", "10.0.0.3:5000", "B", "inventory", "")).toBe(true);
    h.loader.startTicking();
    await h.run(30_000);
    expect(h.events.ofType("rollout.started")).toEqual([]);
    expect(readyReplicas(h).sort()).toEqual(["A", "B"]);
    expect(h.loader.replicaStatus("m1")?.rollout).toBeUndefined();
    h.loader.close();
  });

  it("is a stable 16-hex digest of the load settings only", () => {
    const a = modelSpec({ id: "m", backend: "llama-cpp", options: ["x"], load: { threads: 2 } });
    expect(loadDigest(a)).toMatch(/^[0-9a-f]{16}$/);
    expect(loadDigest(modelSpec({ ...a, replicas: { min: 1, max: 3, targetInFlight: 1, scaleDownAfterMs: 1 } }))).toBe(loadDigest(a));
    expect(loadDigest(modelSpec({ ...a, options: ["y"] }))).not.toBe(loadDigest(a));
  });
});
