import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { modelSpec } from "./model-spec.js";
import { createHarness, defaultModels } from "./test-fakes.js";

const unavailable = () => new WardenError(Code.Unavailable, "connection refused");

type Harness = ReturnType<typeof createHarness>;

/** m2 (same group) waits while the leftover on n2 lives, then starts once its stop succeeds and it is reaped first. */
async function m2WaitsForLeftover(h: Harness, leftover: string) {
  const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
  await h.run(5_000);
  expect(m2.done()).toBe(false);
  expect(h.n2.starts.filter((s) => s.request.model === "m2")).toHaveLength(0);
  h.n2.stopScript = () => ({ t: "stopped" });
  await h.until(() => m2.done());
  // reaped before m2 was started
  expect(h.log.indexOf(`event leftover.reaped ${leftover}`)).toBeLessThan(h.log.indexOf(`start m2 ${m2.value().incarnation}`));
  return m2.value();
}

// A leftover conflicts by its model's groups as configured now, like a held
// instance (groups apply live), not by the groups it was recorded with.
describe("leftover group conflicts follow the model table", () => {
  it("a leftover recorded while its model was out of the config blocks a same-group load once the model is back (seed 48116)", async () => {
    const models = defaultModels().map((m) => (m.id === "m1" || m.id === "m2" ? modelSpec({ ...m, groups: ["gpu0"] }) : m));
    const h = createHarness({ models });
    h.placement.route.set("m1", "n2");
    h.placement.route.set("m2", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    // reload without m1: its config unload fails remotely → a leftover, recorded with no groups
    await Promise.all(h.loader.setModels(models.filter((m) => m.id !== "m1")));
    expect(h.loader.leftoverList()).toMatchObject([{ incarnation: m1.incarnation, nodeId: "n2", model: "m1" }]);
    // reload with m1 (group gpu0) again; the leftover still runs m1 on n2
    await Promise.all(h.loader.setModels(models));
    const m2 = await m2WaitsForLeftover(h, m1.incarnation);
    expect(m2.phase).toBe("ready");
  });

  it("groups given to a leftover's model by UpdatePolicy apply to the leftover at once", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    h.placement.route.set("m2", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = unavailable;
    expect((await h.loader.unload("m1", { force: true })).t).toBe("leftover");
    h.loader.patchModel("m1", { pinned: false, groups: ["gpu0"] });
    h.loader.patchModel("m2", { pinned: false, groups: ["gpu0"] });
    expect(h.loader.core.placementSummary("n2", "m2", ["gpu0"]).blockingConflicts).toEqual([`leftover m1`]);
    await m2WaitsForLeftover(h, m1.incarnation);
  });
});
