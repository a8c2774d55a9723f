import { describe, expect, it } from "vitest";
import { readyReplicas, replicaHarness, replicaModels, twoReplicas } from "./replica-test-kit.js";

// A rollout shows while it runs (ListModels / `models ls` read replicaStatus) and is audited with
// its start and its end, with counts.

describe("a rollout's surfaces", () => {
  it("replicaStatus shows it while it runs (current/stale/keep); rollout.started and rollout.finished bracket it with counts", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    const old = await twoReplicas(h);
    expect(h.loader.replicaStatus("m1")?.rollout).toBeUndefined();
    h.loader.startTicking();
    h.n1.startScript = () => {}; // replacements stay loading until the test says
    h.n2.startScript = () => {};
    h.placement.route.set("m1", "n1");
    await Promise.all(h.loader.setModels(replicaModels({ min: 0, max: 2, targetInFlight: 1 }, { options: ["rev:2"] })));
    await h.until(() => h.events.ofType("replica.scaled-up").some((e) => e.cause === "rollout"));
    expect(h.events.ofType("rollout.started").map((e) => [e.model, e.stale, e.keep])).toEqual([["m1", 2, 2]]);
    expect(h.loader.replicaStatus("m1")?.rollout).toEqual({ current: 0, stale: 2, keep: 2 });
    h.n1.startOf("m1").spawned().ready();
    // The first stale one stopped once the first replacement was ready: 1 current, 1 stale.
    await h.until(() => h.events.ofType("eviction.stopped").filter((e) => e.reason === "rollout").length === 1 && h.loader.replicaStatus("m1")?.rollout?.current === 1);
    expect(h.loader.replicaStatus("m1")?.rollout).toEqual({ current: 1, stale: 1, keep: 2 });
    expect(h.events.ofType("rollout.finished")).toEqual([]);
    await h.until(() => h.n1.starts.length + h.n2.starts.length === 4);
    h.n1.startOf("m1").spawned().ready(); // placement sends m1 to n1
    await h.until(() => h.events.ofType("rollout.finished").length === 1);
    expect(h.events.ofType("rollout.finished").map((e) => [e.model, e.replaced, e.ready])).toEqual([["m1", 2, 2]]);
    expect(readyReplicas(h).some((i) => old.includes(i))).toBe(false);
    expect(h.loader.replicaStatus("m1")?.rollout).toBeUndefined();
    h.loader.close();
  });

  it("a model removed from the config mid-rollout ends it (rollout.finished, nothing replaced)", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    await twoReplicas(h);
    h.loader.startTicking();
    h.n1.startScript = () => {};
    h.n2.startScript = () => {};
    await Promise.all(h.loader.setModels(replicaModels({ min: 0, max: 2, targetInFlight: 1 }, { options: ["rev:2"] })));
    await h.until(() => h.events.ofType("rollout.started").length === 1);
    void h.loader.setModels(h.loader.modelSpecs().filter((m) => m.id !== "m1"));
    expect(h.events.ofType("rollout.finished").map((e) => [e.model, e.replaced])).toEqual([["m1", 0]]);
    h.loader.close();
  });
});
