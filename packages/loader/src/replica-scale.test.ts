import { Code } from "@warden/common";
import { describe, expect, it } from "vitest";
import { modelSpec, replicaBounds } from "./model-spec.js";
import { createHarness, defaultModels } from "./test-fakes.js";

function expectThrows(fn: () => unknown, code: Code, field: string): void {
  try {
    fn();
  } catch (err) {
    expect(err).toMatchObject({ code, details: { field } });
    return;
  }
  throw new Error("expected a throw");
}

describe("Loader.scale and replicaStatus", () => {
  it("scale sets min/max live, emits replica.scale-set, and replicaStatus reports them", () => {
    const h = createHarness();
    expect(h.loader.replicaStatus("m1")).toMatchObject({ model: "m1", settings: { min: 0, max: 1 }, ready: 0, loading: 0, desired: 0, blocked: undefined });
    expect(h.loader.scale("m1", { max: 3 }, "alice")).toMatchObject({ min: 0, max: 3, targetInFlight: 4 });
    expect(h.loader.scale("m1", { min: 2 }, "alice")).toMatchObject({ min: 2, max: 3 });
    expect(h.loader.modelSpec("m1")?.replicas).toMatchObject({ min: 2, max: 3 });
    expect(h.loader.replicaStatus("m1")).toMatchObject({ settings: { min: 2, max: 3 }, desired: 2 });
    expect(h.events.ofType("replica.scale-set")).toMatchObject([
      { model: "m1", operator: "alice", min: 0, max: 3, nodeId: "", incarnation: "" },
      { model: "m1", operator: "alice", min: 2, max: 3 },
    ]);
    expect(h.loader.replicaStatuses().map((r) => r.model)).toEqual(["m1", "m2", "m3", "m4"]);
    expect(h.loader.replicaStatus("nope")).toBeUndefined();
  });

  it("a rejected scale names the field and leaves the settings exactly as before", () => {
    const h = createHarness();
    h.loader.scale("m1", { min: 1, max: 2 }, "alice");
    const before = h.loader.modelSpec("m1");
    const events = h.events.list.length;
    expectThrows(() => h.loader.scale("zz", { max: 2 }, "a"), Code.NotFound, "model");
    expectThrows(() => h.loader.scale("m1", { min: -1 }, "a"), Code.InvalidArgument, "min");
    expectThrows(() => h.loader.scale("m1", { min: 1.5 }, "a"), Code.InvalidArgument, "min");
    expectThrows(() => h.loader.scale("m1", { max: 0 }, "a"), Code.InvalidArgument, "max");
    expectThrows(() => h.loader.scale("m1", { max: replicaBounds.maxReplicas + 1 }, "a"), Code.InvalidArgument, "max");
    expectThrows(() => h.loader.scale("m1", { min: 3 }, "a"), Code.InvalidArgument, "min"); // above max 2
    expectThrows(() => h.loader.scale("m1", { min: 0, max: 0 }, "a"), Code.InvalidArgument, "max");
    expectThrows(() => h.loader.scale("m1", { max: 0.5 }, "a"), Code.InvalidArgument, "max");
    expectThrows(() => h.loader.scale("m1", { min: 5, max: 4 }, "a"), Code.InvalidArgument, "min");
    expect(h.loader.modelSpec("m1")).toBe(before);
    expect(h.events.list.length).toBe(events);
  });

  it("the override survives a reload that leaves the model's replicas alone, and yields to one that changes them", async () => {
    const h = createHarness();
    h.loader.scale("m1", { max: 4 }, "alice");
    await Promise.all(h.loader.setModels(defaultModels()));
    expect(h.loader.modelSpec("m1")?.replicas.max).toBe(4);
    h.loader.scale("m1", { min: 1 }, "alice"); // still against the config's replicas
    await Promise.all(h.loader.setModels(defaultModels()));
    expect(h.loader.modelSpec("m1")?.replicas).toMatchObject({ min: 1, max: 4 });
    const changed = defaultModels().map((m) => (m.id === "m1" ? modelSpec({ id: "m1", backend: "sim", replicas: { min: 0, max: 2, targetInFlight: 4, scaleDownAfterMs: 300_000 } }) : m));
    await Promise.all(h.loader.setModels(changed));
    expect(h.loader.modelSpec("m1")?.replicas).toMatchObject({ min: 0, max: 2 });
    await Promise.all(h.loader.setModels(changed));
    expect(h.loader.modelSpec("m1")?.replicas).toMatchObject({ min: 0, max: 2 });
  });

  it("replicaStatus counts a loading and a ready instance from the held table", async () => {
    const h = createHarness();
    h.n1.startScript = () => {};
    const p = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.flush();
    expect(h.loader.replicaStatus("m1")).toMatchObject({ ready: 0, loading: 1, queued: 1 });
    h.n1.startOf("m1").spawned().ready();
    await h.flush();
    expect(p.done()).toBe(true);
    expect(h.loader.replicaStatus("m1")).toMatchObject({ ready: 1, loading: 0, stopping: 0, leftovers: 0, queued: 0, desired: 1 });
  });
});
