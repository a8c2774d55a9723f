import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";
import { createHarness, defaultModels } from "./test-fakes.js";

// The replica reconciler's work is a count (models decided for on a pass):
// it follows what changed and what is due, not the size of the model table.

describe("replica reconciler work", () => {
  it("looks at no model on a pass when none of 2 000 replicated models changed", async () => {
    const models = [...defaultModels(), ...Array.from({ length: 2_000 }, (_, i) => modelSpec({ id: `r${String(i)}`, backend: "sim", replicas: { min: 0, max: 3, targetInFlight: 1, scaleDownAfterMs: 60_000 } }))];
    const h = createHarness({ models });
    h.loader.startTicking();
    await h.run(500);
    // A new model table is looked at whole, once.
    expect(h.loader.replicaPassWork().visited).toBe(models.length);
    await h.run(500);
    expect(h.loader.replicaPassWork()).toEqual({ visited: 0, waiting: 0 });
    await h.run(5_000);
    expect(h.loader.replicaPassWork()).toEqual({ visited: 0, waiting: 0 });
  });

  it("looks at a model again when its replicas change or its scale-down timer is due", async () => {
    const h = replicaHarness({ min: 1, max: 3, targetInFlight: 1, scaleDownAfterMs: 60_000 });
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 1);
    await h.run(1_000);
    // One ready replica at min: nothing to decide, and its idle timer is running.
    expect(h.loader.replicaPassWork()).toEqual({ visited: 0, waiting: 1 });
    // A call starts and ends on the replica: its model is looked at once.
    const lease = await h.loader.acquire("m1", h.never);
    lease.complete();
    await h.run(500);
    expect(h.loader.replicaPassWork().visited).toBe(1);
    await h.run(500);
    expect(h.loader.replicaPassWork().visited).toBe(0);
    // Past scaleDownAfter the timer wakes it once (the last replica stays: min 1).
    await h.run(60_000);
    expect(readyReplicas(h)).toHaveLength(1);
    expect(h.loader.replicaPassWork()).toEqual({ visited: 0, waiting: 0 });
  });
});
