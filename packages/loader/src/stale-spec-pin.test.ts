import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { createHarness } from "./test-fakes.js";

// A load keeps its own copy of the model's spec, and admission and
// registration apply the spec's pin and groups to the watchdog's policy. A
// load that outlives a config reload must apply the config as it is now, not
// as it was when the load began (simulation seed 28: a replica load started
// before a reload unpinned m5 pinned it again; the stale pin let another
// model past the per-node limit by the pins-only rule).
describe("a load that outlives a config reload", () => {
  it("admits and registers with the pin and groups configured now", async () => {
    const models = [modelSpec({ id: "m1", backend: "sim", pinned: true, groups: ["g1"] }), modelSpec({ id: "m2", backend: "sim" })];
    const h = createHarness({ models, enforcement: { maxAttempts: 10, intervalMs: 1_000 } });
    h.placement.defaultNode = undefined; // no room yet: admission retries placement
    h.placement.noReadyNode = true; // a state that ends: the load waits (loadWait), retrying placement
    const load = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.run(1_500);
    expect(load.done()).toBe(false);
    await Promise.all(h.loader.setModels([modelSpec({ id: "m1", backend: "sim", pinned: false, groups: ["g2"] }), models[1] ?? modelSpec({ id: "m2", backend: "sim" })]));
    expect(h.loader.core.isPinned("m1")).toBe(false);
    h.placement.defaultNode = "n1";
    await h.until(() => load.done());
    expect(h.n1.starts.map((x) => x.request.model)).toEqual(["m1"]);
    expect(h.loader.core.isPinned("m1")).toBe(false);
    expect(h.loader.getPolicy().modelGroups["m1"]).toEqual(["g2"]);
  });
});
