import { describe, expect, it } from "vitest";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";

// A restarted coordinator's admission gate is a time window: a node may
// register after it without having reported its inventory. Its replicas are
// about to be adopted, so the reconciler must not load more meanwhile (the
// real-process case: test/replicas-restart.test.ts, a third replica of a max-2
// model on a node that already ran one, against spread node).
describe("replica loads wait for every node's first inventory", () => {
  it("a min floor load is deferred (no breaker, no scale-up event) while a node has reported no inventory, and starts once it has", async () => {
    const h = replicaHarness({ min: 2, max: 2, targetInFlight: 1 });
    h.inventory.answers.set("m1", { t: "unknown", reason: `node "n2" has not reported an inventory yet`, noInventoryYet: true });
    h.loader.startTicking();
    await h.run(5_000);
    expect(h.n1.starts).toHaveLength(0);
    expect(h.events.ofType("replica.scaled-up")).toEqual([]);
    expect(h.events.ofType("replica.scale-blocked")).toEqual([]);
    expect(h.loader.replicaStatus("m1")?.blocked).toBeUndefined();
    h.inventory.answers.delete("m1");
    await h.until(() => readyReplicas(h).length === 2);
    expect(h.events.ofType("replica.scaled-up").map((e) => e.cause)).toEqual(["min", "min"]);
  });

  it("a replica load already retrying placement stops (no breaker) when a node registers without an inventory, and the floor is restored once it reports", async () => {
    const h = replicaHarness({ min: 1, max: 2, targetInFlight: 1 });
    h.placement.defaultNode = undefined; // no room yet: the load retries placement
    h.placement.noReadyNode = true; // a state that ends: the load waits (loadWait), retrying placement
    h.loader.startTicking();
    await h.run(1_000);
    expect(h.placement.calls.length).toBeGreaterThan(0);
    // A node appears but has reported nothing: what runs there is unknown.
    h.inventory.answers.set("m1", { t: "unknown", reason: `node "n1" has not reported an inventory yet`, noInventoryYet: true });
    h.placement.defaultNode = "n1";
    await h.run(5_000);
    expect(h.n1.starts).toHaveLength(0);
    expect(h.events.ofType("replica.scale-blocked")).toEqual([]);
    h.inventory.answers.delete("m1");
    await h.until(() => readyReplicas(h).length === 1);
    expect(h.n1.starts).toHaveLength(1);
  });

  it("an unreachable node's last inventory (not a missing one) does not hold back the floor", async () => {
    const h = replicaHarness({ min: 1, max: 2, targetInFlight: 1 });
    h.inventory.answers.set("m1", { t: "unknown", reason: `node "n2" is unreachable and its last inventory had "m1"` });
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 1);
  });
});
