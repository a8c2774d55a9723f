import { Code } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createHarness } from "./test-fakes.js";

// An on-demand load serves calls while no instance of the model is routable.
// One adopted while the load waits in admission (a node's inventory lists it,
// e.g. after a coordinator restart) serves them instead: the load must not
// start a second copy of a max-1 model (simulation seed 24: m0 started on n2
// 373 ms after its running instance on n1 was adopted).
describe("an instance adopted during a load's admission", () => {
  it("ends the on-demand load at the next placement attempt: no start, the caller gets the adopted instance", async () => {
    const h = createHarness({ enforcement: { maxAttempts: 10, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined; // no room yet: admission retries placement
    h.placement.noReadyNode = true; // a state that ends: the load waits (loadWait), retrying placement
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(1_500);
    expect(h.placement.calls.length).toBeGreaterThan(0);
    expect(load.done()).toBe(false);
    const spec = h.loader.modelSpec("m1");
    if (spec === undefined) throw new Error("m1 is configured");
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(true);
    h.placement.defaultNode = "n1"; // room now, but the model runs already
    await h.until(() => load.done());
    expect(load.value().incarnation).toBe("old-1");
    expect(h.n1.starts).toHaveLength(0);
    expect(h.n2.starts).toHaveLength(0);
    expect(h.loader.heldInstances().map((x) => x.incarnation)).toEqual(["old-1"]);
    // nothing of the abandoned attempt is left: no reservation, no failure audited
    expect(h.loader.core.instances().map((v) => v.incarnation)).toEqual(["old-1"]);
    expect(h.events.ofType("backend.load-failed")).toEqual([]);
  });

  // Seed 2878 (replicas on): m2 (max 1) was adopted on n3 while a restarted
  // coordinator's on-demand load waited in admission; an event-loop stall then
  // made n3 unreachable before the load's next attempt, which saw no routable
  // replica and started a second copy on n0. With the replicas filling max on
  // an unreachable node the caller sees the node, as a call arriving then does.
  it("ends it too when the adopted instance's node is unreachable and the model is at max: no start, the call is UNAVAILABLE naming the node", async () => {
    const h = createHarness({ enforcement: { maxAttempts: 10, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined;
    h.placement.noReadyNode = true; // a state that ends: the load waits (loadWait), retrying placement
    const call = h.track(h.loader.acquire("m1", h.never));
    await h.run(1_500);
    expect(call.done()).toBe(false);
    const spec = h.loader.modelSpec("m1");
    if (spec === undefined) throw new Error("m1 is configured");
    expect(spec.replicas.max).toBe(1);
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(true);
    h.directory.unreachable.add("n2");
    h.placement.defaultNode = "n1";
    await h.until(() => call.done());
    expect(call.error().code).toBe(Code.Unavailable);
    expect(call.error().details["nodeId"]).toBe("n2");
    expect(h.n1.starts).toHaveLength(0);
    expect(h.n2.starts).toHaveLength(0);
    expect(h.loader.core.instances().map((v) => v.incarnation)).toEqual(["old-1"]);
    expect(h.events.ofType("backend.load-failed")).toEqual([]);
  });
});
