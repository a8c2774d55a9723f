import { describe, expect, it } from "vitest";
import { replicaHarness } from "./replica-test-kit.js";

// A replica load that waits for room is judged against the model as configured
// now: a ScaleModel that lowers max meanwhile ends it as not needed, instead of
// letting it start a replica past the new max.
describe("a replica load in admission reads max as configured now", () => {
  it("a floor load retrying placement starts nothing once ScaleModel lowered max to the replicas already there", async () => {
    const h = replicaHarness({ min: 2, max: 2 }, { enforcement: { maxAttempts: 30, intervalMs: 1_000 } });
    const spec = h.loader.modelSpec("m1");
    if (spec === undefined) throw new Error("m1 is configured");
    expect(h.loader.adoptRemoteOnly(spec, "n2", "n2:7000", "old-1")).toBe(true);
    h.placement.defaultNode = undefined; // no room: the floor's load for the second replica retries placement
    h.loader.startTicking();
    await h.until(() => h.placement.calls.length > 0);
    h.loader.scale("m1", { min: 1, max: 1 }, "ops");
    h.placement.defaultNode = "n1"; // room now
    await h.run(5_000);
    expect(h.n1.starts).toHaveLength(0);
    expect(h.events.ofType("replica.scaled-up")).toEqual([]);
    expect(h.loader.heldInstances().map((x) => x.incarnation)).toEqual(["old-1"]);
    h.loader.close();
  });
});
