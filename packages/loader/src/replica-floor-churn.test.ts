import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { readyReplicas } from "./replica-test-kit.js";
import { createHarness } from "./test-fakes.js";

// Simulation seed 788 (replicas on): one placeable node with limitPerNode 2
// and two models with min 2. Each floor load found the node full and evicted
// by LRU — its own model's other replica, or the other model's floor replica —
// so every load succeeded, the breaker never opened, and the two models took
// each other's replicas for ever (an eviction and a load every two seconds
// in a quiet cluster). A replica load spares its own model's replicas and any
// replica holding another model at or below its min: with nothing else to
// evict it fails, and the breaker opens.
const floor = (id: string, min: number) => modelSpec({ id, backend: "sim", replicas: { min, max: min, targetInFlight: 4, scaleDownAfterMs: 300_000 } });

describe("a replica load on a full node", () => {
  it("never evicts its own model's replica: the floor load is blocked", async () => {
    const h = createHarness({ models: [floor("m1", 2)], policy: { limitPerNode: 1 } });
    h.loader.startTicking();
    await h.until(() => h.events.ofType("replica.scale-blocked").length > 0);
    await h.run(60_000);
    expect(h.events.ofType("eviction.started")).toEqual([]);
    expect(readyReplicas(h)).toHaveLength(1);
    expect(h.n1.starts).toHaveLength(1);
    expect(h.loader.replicaStatus("m1")?.blocked).toBeDefined();
    h.loader.close();
  });

  it("never evicts another model's replica at its min: no churn between two floors", async () => {
    const h = createHarness({ models: [floor("m1", 1), floor("m2", 1)], policy: { limitPerNode: 1 } });
    h.loader.startTicking();
    await h.until(() => h.events.ofType("replica.scale-blocked").length > 0);
    await h.run(60_000);
    expect(h.events.ofType("eviction.started")).toEqual([]);
    expect(h.n1.starts).toHaveLength(1);
    expect(readyReplicas(h, "m1").length + readyReplicas(h, "m2").length).toBe(1);
    h.loader.close();
  });

  it("still evicts a replica above its model's min, and an on-demand load still evicts a floor replica (LRU as before)", async () => {
    const plain = modelSpec({ id: "m3", backend: "sim" });
    const h = createHarness({ models: [floor("m1", 1), plain], policy: { limitPerNode: 1 } });
    const l = await h.loader.acquire("m3", h.never); // m3 (min 0) first
    l.complete();
    h.loader.startTicking();
    // m1's floor load evicts m3 (above its min 0)
    await h.until(() => readyReplicas(h, "m1").length === 1);
    expect(h.events.ofType("eviction.started").map((e) => e.model)).toEqual(["m3"]);
    // a call to m3 evicts m1's floor replica (LRU, as LocalAI)
    const l2 = await h.loader.acquire("m3", h.never);
    l2.complete();
    expect(h.events.ofType("eviction.started").map((e) => e.model)).toEqual(["m3", "m1"]);
    h.loader.close();
  });
});
