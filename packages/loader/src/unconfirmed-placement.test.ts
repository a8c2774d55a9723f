import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { modelSpec } from "./model-spec.js";
import { createHarness, defaultModels } from "./test-fakes.js";
import type { UnconfirmedReplica } from "./unconfirmed-replicas.js";

// After a restart or a takeover, an instance the journal last saw alive on a
// node that has not reported yet may well be running there. It counts as
// present on that node for every placement rule — exclusive groups, the
// per-node LRU limit, memory — not only for replica counts: before, a load of
// the other member of its exclusive group was admitted on that node and both
// ran side by side once the node reported.

const onN2 = (incarnation: string, model = "m1"): UnconfirmedReplica => ({ incarnation, nodeId: "n2", model, address: "10.0.0.2:5000" });

/** m1 and m2 share the exclusive group "gpu0"; each model is 1 GiB. */
function groupHarness(policy: { limitPerNode?: number } = {}) {
  const models = defaultModels().map((m) => modelSpec({ ...m, sizeBytes: 1 << 30, ...(m.id === "m1" || m.id === "m2" ? { groups: ["gpu0"] } : {}) }));
  const h = createHarness({ models, policy });
  h.placement.route.set("m1", "n2");
  h.placement.route.set("m2", "n2");
  h.placement.route.set("m3", "n2");
  return h;
}

type Harness = ReturnType<typeof groupHarness>;

function startsOf(h: Harness, model: string): number {
  return h.n2.starts.filter((s) => s.request.model === model).length;
}

/** What the node table does with the node's first inventory, J1 still running: reconcile (adopt), then settle the journal's word. */
function reportWithJ1(h: Harness): void {
  const spec = h.loader.modelSpec("m1");
  if (spec === undefined) throw new Error("m1");
  expect(h.loader.adoptRemoteOnly(spec, "n2", "10.0.0.2:5000", "J1")).toBe(true);
  h.loader.journalReplicas.nodeReported("n2");
}

describe("journaled instances not yet confirmed count as present on their node", () => {
  it("an exclusive group: the other member waits while J1 may run on n2, then evicts the adopted J1 before it starts", async () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1")]);
    expect(h.loader.core.placementSummary("n2", "m2", ["gpu0"]).blockingConflicts).toEqual(["unconfirmed m1"]);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(10_000);
    // Not evictable before its node reports: the load waits rather than run beside it.
    expect(m2.done()).toBe(false);
    expect(startsOf(h, "m2")).toBe(0);
    reportWithJ1(h);
    await h.until(() => m2.done());
    expect(m2.value().nodeId).toBe("n2");
    // J1 was stopped first: the two members never ran on n2 together.
    expect(h.log.indexOf("stop J1")).toBeGreaterThanOrEqual(0);
    expect(h.log.indexOf("stop J1")).toBeLessThan(h.log.indexOf(`start m2 ${m2.value().incarnation}`));
  });

  it("an exclusive group: the node reports without J1, and the waiting load starts at once", async () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1")]);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(10_000);
    expect(startsOf(h, "m2")).toBe(0);
    h.loader.journalReplicas.nodeReported("n2");
    await h.until(() => m2.done());
    expect(h.log.filter((l) => l.startsWith("stop "))).toEqual([]);
    expect(h.loader.core.placementSummary("n2", "m2", ["gpu0"]).blockingConflicts).toEqual([]);
  });

  it("an exclusive group: the node reports J1 still loading (not adopted): it keeps counting until a later report adopts it, then is evicted before the other member starts", async () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1")]);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(10_000);
    // The first inventory lists J1 loading: reconcile adopts only ready instances, so J1 is not known yet.
    h.loader.journalReplicas.nodeReported("n2", new Set(["J1"]));
    await h.run(10_000);
    expect(startsOf(h, "m2")).toBe(0);
    expect(h.loader.core.placementSummary("n2", "m2", ["gpu0"]).blockingConflicts).toEqual(["unconfirmed m1"]);
    // A later inventory lists it ready: adopted, then settled.
    reportWithJ1(h);
    await h.until(() => m2.done());
    expect(h.log.indexOf("stop J1")).toBeGreaterThanOrEqual(0);
    expect(h.log.indexOf("stop J1")).toBeLessThan(h.log.indexOf(`start m2 ${m2.value().incarnation}`));
  });

  it("an exclusive group: J1 reported loading, then gone from a later inventory: the other member starts", async () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1")]);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    h.loader.journalReplicas.nodeReported("n2", new Set(["J1"]));
    await h.run(10_000);
    expect(startsOf(h, "m2")).toBe(0);
    h.loader.journalReplicas.nodeReported("n2", new Set());
    await h.until(() => m2.done());
    expect(h.log.filter((l) => l.startsWith("stop "))).toEqual([]);
  });

  it("an exclusive group: the node declared lost lets the other member start (the journal's word about it is void)", async () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1")]);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(10_000);
    expect(startsOf(h, "m2")).toBe(0);
    h.loader.onNodeLost("n2");
    // n2's agent is still in the directory here; placement routes m2 there and admission no longer sees J1.
    await h.until(() => m2.done());
    expect(startsOf(h, "m2")).toBe(1);
  });

  it("the LRU limit: with limitPerNode 1 an unrelated model waits for n2's report instead of running beside J1", async () => {
    const h = groupHarness({ limitPerNode: 1 });
    h.loader.journalReplicas.restore([onN2("J1")]);
    expect(h.loader.core.occupancy("n2")).toMatchObject({ unconfirmed: 1, total: 1 });
    const m3 = h.track(h.loader.ensureLoaded("m3", h.never));
    await h.run(10_000);
    expect(m3.done()).toBe(false);
    expect(startsOf(h, "m3")).toBe(0);
    reportWithJ1(h);
    await h.until(() => m3.done());
    // The adopted J1 was the LRU victim, stopped before m3 started.
    expect(h.log.indexOf("stop J1")).toBeLessThan(h.log.indexOf(`start m3 ${m3.value().incarnation}`));
  });

  it("a load blocked only by them past its attempts is UNAVAILABLE naming the node (transient), and started nothing", async () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1")]);
    const m2 = h.track(h.loader.ensureLoaded("m2", h.never));
    await h.run(60_000);
    expect(m2.error()).toMatchObject({ code: Code.Unavailable, details: { model: "m2", nodeId: "n2" } });
    expect(m2.error().message).toContain("1 unconfirmed");
    expect(startsOf(h, "m2")).toBe(0);
  });

  it("memory: J1's size is on n2's accounted bytes until n2 reports", () => {
    const h = groupHarness();
    h.loader.journalReplicas.restore([onN2("J1"), onN2("J2", "m4")]);
    expect(h.loader.core.placementSummary("n2", "m3", []).accountedBytes).toBe(2 * (1 << 30));
    expect(h.loader.core.placementSummary("n2", "m3", []).occupied).toBe(2);
    expect(h.loader.forget("J2", "ops", "node rebuilt")).toBe(true);
    expect(h.loader.core.placementSummary("n2", "m3", []).accountedBytes).toBe(1 << 30);
    h.loader.journalReplicas.nodeReported("n2");
    expect(h.loader.core.placementSummary("n2", "m3", []).accountedBytes).toBe(0);
  });

  it("groups given by UpdatePolicy apply to an unconfirmed instance at once", () => {
    const h = createHarness();
    h.loader.journalReplicas.restore([onN2("J1", "m3")]);
    expect(h.loader.core.placementSummary("n2", "m4", ["g"]).blockingConflicts).toEqual([]);
    h.loader.patchModel("m3", { pinned: false, groups: ["g"] });
    expect(h.loader.core.placementSummary("n2", "m4", ["g"]).blockingConflicts).toEqual(["unconfirmed m3"]);
  });
});

describe("loads a node reports starting that this coordinator does not know", () => {
  it("startingElsewhere names their node once per load of the model: not orphans, not the journal's entries, gone with the report", () => {
    const h = createHarness();
    const starting = (incarnation: string, model: string) => ({ kind: "unconfirmed" as const, key: incarnation, model, groups: [], sizeBytes: 0 });
    h.loader.journalReplicas.restore([onN2("J1")]);
    h.loader.setOrphans("n2", [starting("S1", "m1"), { kind: "orphan", key: "pid:7", model: "m1", groups: [], sizeBytes: 0 }, starting("S2", "m3")]);
    h.loader.setOrphans("n1", [starting("S3", "m1")]);
    expect([...h.loader.startingElsewhere("m1")].sort()).toEqual(["n1", "n2"]);
    expect([...h.loader.startingElsewhere("m3")]).toEqual(["n2"]);
    h.loader.setOrphans("n1", []);
    expect([...h.loader.startingElsewhere("m1")]).toEqual(["n2"]);
  });

  it("a load given up before its Spawned arrived (the stream broke) counts on its node until the node reports: groups, limit and replicas", async () => {
    // The agent's start runs on, bound to its own deadline, not to our stream: the process may well be there.
    const h = groupHarness();
    h.n2.startScript = (st) => {
      st.end();
    };
    const m1 = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.until(() => m1.done());
    expect(m1.error().message).toContain("ended the start without ready");
    const inc = h.n2.starts[0]?.incarnation ?? "";
    expect(h.loader.journalReplicas.list()).toEqual([{ incarnation: inc, nodeId: "n2", model: "m1", address: "" }]);
    // The journal says so: a coordinator taking over from it counts the instance too.
    expect(h.events.ofType("backend.load-failed")).toMatchObject([{ incarnation: inc, nodeId: "n2", outcomeUnknown: true }]);
    expect(h.loader.core.placementSummary("n2", "m2", ["gpu0"]).blockingConflicts).toEqual(["unconfirmed m1"]);
    expect(h.loader.journalReplicas.count("m1")).toBe(1);
    // n2's inventory lists it still starting: it counts on; then one without it: gone.
    h.loader.journalReplicas.nodeReported("n2", new Set([inc]));
    expect(h.loader.journalReplicas.count("m1")).toBe(1);
    h.loader.journalReplicas.nodeReported("n2", new Set());
    expect(h.loader.journalReplicas.list()).toEqual([]);
    expect(h.loader.core.placementSummary("n2", "m2", ["gpu0"]).blockingConflicts).toEqual([]);
  });

  it("a load the agent answered failed (its process is gone), or one cancelled here, counts nowhere", async () => {
    const h = groupHarness();
    h.n2.startScript = (st) => {
      st.failed("backend exited before ready");
    };
    const m1 = h.track(h.loader.ensureLoaded("m1", h.never));
    await h.until(() => m1.done());
    expect(m1.error().message).toContain("exited before ready");
    expect(h.loader.journalReplicas.list()).toEqual([]);
    expect(h.loader.core.occupancy("n2").total).toBe(0);
  });
});

type Op = { t: "restore"; inc: number; node: number; model: number } | { t: "report"; node: number } | { t: "lost"; node: number } | { t: "forget"; inc: number };

describe("unconfirmed occupancy", () => {
  it("the watchdog's count on each node always equals the journal table's entries there, whatever happens", () => {
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ t: fc.constant("restore" as const), inc: fc.nat(20), node: fc.nat(3), model: fc.integer({ min: 1, max: 4 }) }),
      fc.record({ t: fc.constant("report" as const), node: fc.nat(3) }),
      fc.record({ t: fc.constant("lost" as const), node: fc.nat(3) }),
      fc.record({ t: fc.constant("forget" as const), inc: fc.nat(20) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const models = defaultModels().map((m) => modelSpec({ ...m, sizeBytes: 1000 }));
        const h = createHarness({ models });
        for (const o of ops) {
          if (o.t === "restore") h.loader.journalReplicas.restore([{ incarnation: `i${String(o.inc)}`, nodeId: `n${String(o.node)}`, model: `m${String(o.model)}`, address: "" }]);
          else if (o.t === "report") h.loader.journalReplicas.nodeReported(`n${String(o.node)}`);
          else if (o.t === "lost") h.loader.onNodeLost(`n${String(o.node)}`);
          else h.loader.forget(`i${String(o.inc)}`, "ops", "");
          for (let n = 0; n <= 3; n++) {
            const nodeId = `n${String(n)}`;
            const want = h.loader.journalReplicas.list().filter((u) => u.nodeId === nodeId).length;
            const occ = h.loader.core.occupancy(nodeId);
            expect(occ.unconfirmed).toBe(want);
            expect(occ.accountedBytes).toBe(want * 1000);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});
