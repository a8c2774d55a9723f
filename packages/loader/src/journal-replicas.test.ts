import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";
import { UnconfirmedReplicas, type UnconfirmedReplica } from "./unconfirmed-replicas.js";

// A restarted coordinator knows from its journal which instances were alive;
// one on a node that has not registered when the recovery window ends (n3
// below: in no directory) still counts toward its model's max until the node
// reports, is lost, or an operator forgets it. Before, the loader knew nothing
// of it: the floor (or an on-demand call) placed another replica, and the node
// came back with one more than max.

const onN3 = (incarnation: string, model = "m1"): UnconfirmedReplica => ({ incarnation, nodeId: "n3", model, address: "10.0.0.3:5000" });

describe("replicas known only from the journal (node not heard from since the restart)", () => {
  it("count toward max: the min floor loads only what is missing, and the rest once the node has reported without them", async () => {
    const h = replicaHarness({ min: 2, max: 2, targetInFlight: 1 });
    expect(h.loader.journalReplicas.restore([onN3("J1")])).toBe(1);
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 1);
    await h.run(10_000);
    // One load (for the floor: 1 held + 1 unconfirmed = max), never a second.
    expect(h.n1.starts).toHaveLength(1);
    expect(h.events.ofType("replica.scaled-up").map((e) => [e.cause, e.replicas])).toEqual([["min", 2]]);
    expect(h.loader.replicaStatus("m1")?.blocked).toBeUndefined();
    // n3 reports an inventory without J1: it is not running, the floor is restored.
    expect(h.loader.journalReplicas.nodeReported("n3").map((u) => u.incarnation)).toEqual(["J1"]);
    await h.until(() => readyReplicas(h).length === 2);
    expect(h.n1.starts).toHaveLength(2);
  });

  it("a node that reports with the replica: adopted in the same turn, no load beside it", async () => {
    const h = replicaHarness({ min: 2, max: 2, targetInFlight: 1 });
    h.directory.agents.set("n3", h.n2);
    h.loader.journalReplicas.restore([onN3("J1")]);
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 1);
    // n3 registers later than the recovery window: the floor waits for it meanwhile.
    await h.run(10_000);
    expect(h.n1.starts).toHaveLength(1);
    const spec = h.loader.modelSpec("m1");
    if (spec === undefined) throw new Error("m1");
    // What the node table does with n3's first inventory: reconcile (adopt), then settle the journal's word.
    expect(h.loader.adoptRemoteOnly(spec, "n3", "10.0.0.3:5000", "J1")).toBe(true);
    h.loader.journalReplicas.nodeReported("n3");
    await h.run(10_000);
    expect(readyReplicas(h).sort()).toEqual(["J1", "inc-1"]);
    expect(h.n1.starts).toHaveLength(1);
    expect(h.events.ofType("replica.scaled-up")).toHaveLength(1);
  });

  it("an on-demand call to a max-1 model whose one instance is unconfirmed is UNAVAILABLE naming the node, and loads once the node is lost", async () => {
    const h = replicaHarness({ min: 0, max: 1 });
    h.loader.journalReplicas.restore([onN3("J1")]);
    const first = h.track(h.loader.acquire("m1", h.never));
    await h.run(1_000);
    expect(first.error()).toMatchObject({ code: Code.Unavailable, details: { nodeId: "n3", model: "m1" } });
    expect(h.n1.starts).toHaveLength(0);
    h.loader.onNodeLost("n3");
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.nodeId).toBe("n1");
    lease.complete();
  });

  it("a scale-up on load stops at max counting them", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1 });
    h.loader.journalReplicas.restore([onN3("J1")]);
    // max 2, one unconfirmed: the first call loads one (room for it), the second does not scale up.
    const a = await h.loader.acquire("m1", h.never);
    const b = await h.loader.acquire("m1", h.never);
    await h.run(5_000);
    expect(h.n1.starts).toHaveLength(1);
    expect(h.events.ofType("replica.scaled-up")).toEqual([]);
    a.complete();
    b.complete();
  });

  it("restore skips what the loader already tracks; the lost timeout drops only nodes that never registered; forget is audited", () => {
    const h = replicaHarness({ min: 0, max: 2 });
    h.loader.restoreStopIntents([{ incarnation: "L1", nodeId: "n3", model: "m1", address: "10.0.0.3:5001" }]);
    expect(h.loader.journalReplicas.restore([onN3("L1"), onN3("J1"), onN3("J1"), { incarnation: "J2", nodeId: "n2", model: "m1", address: "10.0.0.2:5000" }, { incarnation: "", nodeId: "n3", model: "m1", address: "" }])).toBe(2);
    expect(h.loader.journalReplicas.count("m1")).toBe(2);
    expect(h.loader.journalReplicas.expireUnregistered().map((u) => u.incarnation)).toEqual(["J1"]);
    expect(h.loader.journalReplicas.list().map((u) => u.incarnation)).toEqual(["J2"]);
    expect(h.loader.forget("J2", "ops", "node rebuilt")).toBe(true);
    expect(h.events.ofType("instance.forgotten")).toMatchObject([{ incarnation: "J2", nodeId: "n2", model: "m1", operator: "ops" }]);
    expect(h.loader.journalReplicas.count("m1")).toBe(0);
    expect(h.loader.forget("J2", "ops", "")).toBe(false);
  });
});

type Op = { t: "add"; inc: number; node: number; model: number } | { t: "remove"; inc: number } | { t: "node"; node: number };

describe("UnconfirmedReplicas indexes", () => {
  it("count, ofModel and nodes always agree with a scan of the entries, whatever the operations", () => {
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ t: fc.constant("add" as const), inc: fc.nat(30), node: fc.nat(4), model: fc.nat(3) }),
      fc.record({ t: fc.constant("remove" as const), inc: fc.nat(30) }),
      fc.record({ t: fc.constant("node" as const), node: fc.nat(4) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const u = new UnconfirmedReplicas();
        const model = new Map<string, UnconfirmedReplica>();
        for (const o of ops) {
          if (o.t === "add") {
            const r = { incarnation: `i${String(o.inc)}`, nodeId: `n${String(o.node)}`, model: `m${String(o.model)}`, address: "" };
            expect(u.add(r)).toBe(!model.has(r.incarnation));
            if (!model.has(r.incarnation)) model.set(r.incarnation, r);
          } else if (o.t === "remove") {
            expect(u.remove(`i${String(o.inc)}`)?.incarnation).toBe(model.get(`i${String(o.inc)}`)?.incarnation);
            model.delete(`i${String(o.inc)}`);
          } else {
            const on = [...model.values()].filter((r) => r.nodeId === `n${String(o.node)}`).map((r) => r.incarnation).sort();
            expect(u.removeNode(`n${String(o.node)}`).map((r) => r.incarnation).sort()).toEqual(on);
            for (const inc of on) model.delete(inc);
          }
          const all = [...model.values()];
          expect(u.size).toBe(all.length);
          for (let m = 0; m <= 3; m++) {
            const id = `m${String(m)}`;
            expect(u.count(id)).toBe(all.filter((r) => r.model === id).length);
            expect([...u.ofModel(id)].map((r) => r.incarnation).sort()).toEqual(all.filter((r) => r.model === id).map((r) => r.incarnation).sort());
          }
          expect([...u.nodes()].sort()).toEqual([...new Set(all.map((r) => r.nodeId))].sort());
        }
      }),
      { numRuns: 200 },
    );
  });
});
