import { describe, expect, it } from "vitest";
import { createFixture } from "./watchdog-fixture.js";

// AdmissionRequest.spare (simulation seed 788): victims a replica load must not
// take. They block like pins, but never let the admission past the limit (a
// pins-only shortfall does) and never make it wait: nothing frees them.
describe("an admission that spares instances", () => {
  it("limit: skips a spared victim for the next one in LRU order", () => {
    const f = createFixture({ limitPerNode: 2 });
    const older = f.reg("a1", "m1");
    f.reg("a2", "m2");
    const d = f.core.admit({ nodeId: "n1", model: "m3", incarnation: "m3-1", spare: new Set([older]) });
    expect(d.t).toBe("wait");
    if (d.t !== "wait") return;
    expect(d.stops.map((s) => s.model)).toEqual(["m2"]);
  });

  it("limit: with only spared victims nothing is stopped, nothing admitted, nothing to wait for", () => {
    const f = createFixture({ limitPerNode: 1 });
    const only = f.reg("a1", "m1");
    const d = f.core.admit({ nodeId: "n1", model: "m1", incarnation: "m1-2", spare: new Set([only]) });
    expect(d).toMatchObject({ t: "wait", cause: "limit", stops: [], needMore: false, shortfall: { missing: 1, spared: 1 } });
    expect(f.core.instance("m1-2")).toBeUndefined();
    expect(f.core.instance(only)?.pendingEviction).toBeUndefined();
  });

  it("groups: a spared conflict stops none of the others", () => {
    const f = createFixture({ limitPerNode: 0, modelGroups: { a: ["g"], b: ["g"], c: ["g"] } });
    const a = f.reg("a1", "a");
    f.reg("a2", "b");
    const d = f.core.admit({ nodeId: "n1", model: "c", incarnation: "c-1", groups: ["g"], spare: new Set([a]) });
    expect(d).toMatchObject({ t: "wait", cause: "group", stops: [], needMore: false, shortfall: { spared: 1 } });
    expect(f.core.instances().filter((v) => v.pendingEviction !== undefined)).toEqual([]);
  });
});
