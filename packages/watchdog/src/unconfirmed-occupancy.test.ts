import { describe, expect, it } from "vitest";
import { createFixture } from "./watchdog-fixture.js";
import { expectInvalid } from "./expect-invalid.js";
import { checkSnapshotInvariants } from "./watchdog-snapshot.js";

// An instance a restarted coordinator knows only from its journal, on a node
// that has not reported yet, counts on that node like a leftover: for its
// groups, the limit and memory, and is never selectable (nothing can stop it
// before the node reports). Its own kind, so a refusal names it.
const unconfirmed = (groups: readonly string[] = [], sizeBytes = 0) => ({ kind: "unconfirmed" as const, key: "J1", model: "m0", groups, sizeBytes });

describe("unconfirmed occupancy entries", () => {
  it("an exclusive group: a load of another member waits (need-more, shortfall names it) and is admitted once the entry is gone", async () => {
    const f = createFixture({ modelGroups: { m0: ["heavy"], m2: ["heavy"] } });
    f.core.setNodeOccupancy("n1", [unconfirmed(["heavy"])]);
    expect(await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" })).toMatchObject({ t: "waited", cause: "group", needMore: true, shortfall: { unconfirmed: 1, missing: 1 } });
    expect(f.core.placementSummary("n1", "m2", ["heavy"]).blockingConflicts).toEqual(["unconfirmed m0"]);
    // Another node is not affected.
    expect((await f.svc.admit({ nodeId: "n2", model: "m2", incarnation: "m2-2" })).t).toBe("admitted");
    f.core.setNodeOccupancy("n1", []);
    expect((await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" })).t).toBe("admitted");
    expect(f.port.calls).toHaveLength(0);
  });

  it("the limit: one slot taken, never a victim, need-more; memory: its size is accounted", async () => {
    const f = createFixture({ limitPerNode: 1 });
    f.core.setNodeOccupancy("n1", [unconfirmed([], 700)]);
    expect(f.core.occupancy("n1")).toMatchObject({ unconfirmed: 1, leftovers: 0, orphans: 0, total: 1, accountedBytes: 700 });
    expect(f.core.placementSummary("n1", "m2", []).occupied).toBe(1);
    expect(await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" })).toMatchObject({ t: "waited", cause: "limit", needMore: true, shortfall: { unconfirmed: 1 } });
    expect(f.core.instance("m2-1")).toBeUndefined();
    expect(checkSnapshotInvariants(f.core.snapshot())).toEqual([]);
  });

  it("an unknown kind is refused naming the field, nothing changed", () => {
    const f = createFixture();
    f.core.setNodeOccupancy("n1", [unconfirmed()]);
    expectInvalid(() => {
      f.core.setNodeOccupancy("n1", [{ ...unconfirmed(), kind: "journal" as unknown as "unconfirmed" }]);
    }, "entries[0].kind");
    expect(f.core.occupancy("n1").unconfirmed).toBe(1);
  });
});
