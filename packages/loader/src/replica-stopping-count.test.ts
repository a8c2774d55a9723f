import { describe, expect, it } from "vitest";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";

// A replica being stopped is still held: a failed stop registers it again
// (settle row 3), so a floor or scale-up load counts it toward max — at its
// start (the reconciler) and before every placement attempt after that
// (simulation seeds 245, 1539, 2381: a replica adopted during a min load's
// admission was put pending eviction at once; the load went on and made two
// held replicas of a max-1 model).
describe("a replica load in admission counts the replicas being stopped toward max", () => {
  it("a min load retrying placement starts nothing while an adopted replica's stop is in flight, and restores the floor once it settles", async () => {
    const h = replicaHarness({ min: 1, max: 1 }, { enforcement: { maxAttempts: 30, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined; // no room yet: the floor's load retries placement
    h.placement.noReadyNode = true; // a state that ends: the load waits (loadWait), retrying placement
    h.loader.startTicking();
    await h.until(() => h.placement.calls.length > 0);
    const spec = h.loader.modelSpec("m1");
    if (spec === undefined) throw new Error("m1 is configured");
    // Adopted (a node's inventory), serving a call, and taken for a stop before the load's next attempt:
    // the graceful stop waits for the call, the replica held and pending eviction meanwhile.
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(true);
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.incarnation).toBe("old-1");
    const stop = h.track(h.loader.stopInstance("old-1", { force: false }));
    await h.flush();
    expect(h.loader.heldInstance("old-1")).toBeDefined();
    expect(h.loader.core.stateOf("old-1")).toBe("pending");
    h.placement.defaultNode = "n1"; // room now
    await h.run(5_000); // attempts and reconciler ticks, well inside the stop's deadline
    expect(h.n1.starts).toHaveLength(0);
    expect(h.events.ofType("replica.scaled-up")).toEqual([]);
    expect(h.events.ofType("replica.scale-blocked")).toEqual([]); // not needed now is no failure
    expect(stop.done()).toBe(false);
    expect(h.loader.core.stateOf("old-1")).toBe("pending");
    lease.complete();
    await h.until(() => stop.done() && readyReplicas(h).length === 1);
    expect(h.n1.starts).toHaveLength(1);
    expect(h.loader.heldInstances().map((x) => x.incarnation)).toEqual([h.n1.startOf("m1").incarnation]);
    h.loader.close();
  });
});
