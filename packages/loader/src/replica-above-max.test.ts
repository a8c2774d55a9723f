import { describe, expect, it } from "vitest";
import { drainCluster, readyNodes, startDrain } from "./drain-test-kit.js";
import { modelSpec, type ModelSpec } from "./model-spec.js";
import { decideAboveMax, decideReplicas, type ReplicaView } from "./replica-reconciler.js";
import { readyReplicas, replicaHarness, twoReplicas } from "./replica-test-kit.js";
import type { Harness } from "./test-fakes.js";

// A lowered max: more settled ready replicas than max are stopped at once (reason scale-down,
// replica.scaled-down cause "max"), not after scaleDownAfter — but only when the count is the
// model's, not a moment's: never during a drain move, a rollout, the recovery window, or while a
// replica is still loading or known only from the journal (an adoption not yet settled).

// Two settled replicas of a model whose max an operator just lowered to 1; idle 1 s of a 5 min scaleDownAfter.
const lowered: ReplicaView = {
  min: 0,
  max: 1,
  stopping: 0,
  scaleDownAfterMs: 300_000,
  live: 2,
  ready: 2,
  loadInFlight: false,
  breakerAllows: true,
  idle: [
    { incarnation: "a", idleSinceMs: 9_000 },
    { incarnation: "b", idleSinceMs: 9_000 },
  ],
  nowMs: 10_000,
  aboveMax: {
    settled: [
      { incarnation: "a", inFlight: 0, lastUsedMs: 9_000 },
      { incarnation: "b", inFlight: 0, lastUsedMs: 8_500 },
    ],
    unsettled: 0,
    moving: false,
    recovered: true,
  },
};
const am = lowered.aboveMax!;

describe("a lowered max (the decision)", () => {
  it("stops the least busy replica at once, ties to the least recently used; a busy one only when every one is busy", () => {
    expect(decideReplicas(lowered)).toEqual({ t: "above-max", incarnation: "b" });
    const busy = { ...lowered, idle: [], aboveMax: { ...am, settled: [{ incarnation: "a", inFlight: 3, lastUsedMs: 1 }, { incarnation: "b", inFlight: 1, lastUsedMs: 9_999 }] } };
    expect(decideReplicas(busy)).toEqual({ t: "above-max", incarnation: "b" });
  });

  it("never below max, nor below min or 1", () => {
    expect(decideReplicas({ ...lowered, max: 2 })).toEqual({ t: "none" });
    expect(decideReplicas({ ...lowered, min: 2, max: 2 })).toEqual({ t: "none" });
  });

  it("counts only settled replicas: not while one loads, a load is in flight, or one is known only from the journal", () => {
    expect(decideReplicas({ ...lowered, live: 3, aboveMax: { ...am, unsettled: 1 } })).toEqual({ t: "none" });
    expect(decideReplicas({ ...lowered, loadInFlight: true })).toEqual({ t: "none" });
  });

  it("not during a drain move, a rollout or the recovery window", () => {
    expect(decideReplicas({ ...lowered, aboveMax: { ...am, moving: true } })).toEqual({ t: "none" });
    expect(decideReplicas({ ...lowered, aboveMax: { ...am, recovered: false } })).toEqual({ t: "none" });
    // A rollout (keeping 1 with 3 live: max lowered with the settings) steps down by its own rules (replica-rollout.test.ts).
    const three = { ...lowered, live: 3, ready: 3, aboveMax: { ...am, settled: [...am.settled, { incarnation: "c", inFlight: 0, lastUsedMs: 1 }] } };
    expect(decideAboveMax({ ...three, rollout: { keep: 1, staleIdle: [], freshReady: 0 } }, three.aboveMax)).toBeUndefined();
    expect(decideReplicas(three)).toEqual({ t: "above-max", incarnation: "c" });
  });
});

/** The model table with m1's load settings changed and its max set to `max`, in one reload. */
function changed(h: Harness, max: number): ModelSpec[] {
  return h.loader.modelSpecs().map((m) => (m.id === "m1" ? modelSpec({ ...m, options: ["rev:2"], replicas: { ...m.replicas, max } }) : m));
}

/** Steps until m1 runs one ready replica, not one of `old`, nothing stopping; returns the fewest ready seen meanwhile. */
async function untilOneFresh(h: Harness, old: readonly string[]): Promise<number> {
  let fewest = readyReplicas(h).length;
  await h.until(() => {
    fewest = Math.min(fewest, readyReplicas(h).length);
    const now = readyReplicas(h);
    return now.length === 1 && !old.includes(now[0] ?? "") && h.loader.replicaStatus("m1")?.stopping === 0;
  }, 120_000);
  return fewest;
}

/** Brings m1 to three ready replicas by its floor, then lets the floor go (min 0, max 3). */
async function threeReplicas(h: Harness): Promise<string[]> {
  h.loader.scale("m1", { min: 3 }, "test");
  await h.until(() => readyReplicas(h).length === 3);
  h.loader.scale("m1", { min: 0 }, "test");
  return readyReplicas(h);
}

/** m1's scale-down events as [cause, replicas left]. */
function downs(h: Harness): [string, number][] {
  return h.events.ofType("replica.scaled-down").map((e) => [e.cause, e.replicas]);
}

describe("a lowered max (the loader, fake clock)", () => {
  it("scales down to max within a few ticks, through the normal stop (reason scale-down), the other replica keeps serving", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1, scaleDownAfterMs: 300_000 });
    h.loader.startTicking();
    const [a, b] = await twoReplicas(h);
    h.loader.scale("m1", { max: 1 }, "test");
    await h.run(2_000);
    expect(downs(h)).toEqual([["max", 1]]);
    const stopped = h.events.ofType("eviction.stopped").map((e) => [e.incarnation, e.reason]);
    expect(stopped).toHaveLength(1);
    expect(stopped[0]?.[1]).toBe("scale-down");
    const left = readyReplicas(h);
    expect(left).toHaveLength(1);
    expect([a, b]).toContain(left[0]);
    const l = await h.loader.acquire("m1", h.never);
    expect(l.incarnation).toBe(left[0]);
    l.complete();
    h.loader.close();
  });

  it("not while the recovery window is open: two adopted replicas of a max-1 model wait for admission to open", async () => {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => (open = r));
    const h = replicaHarness({ min: 0, max: 1, scaleDownAfterMs: 300_000 }, { admissionGate: gate });
    h.directory.agents.set("n3", h.n2);
    const spec = h.loader.modelSpec("m1")!;
    expect(h.loader.adoptRemoteOnly(spec, "n2", "10.0.0.2:5000", "A1")).toBe(true);
    expect(h.loader.adoptRemoteOnly(spec, "n3", "10.0.0.3:5000", "A2")).toBe(true);
    h.loader.startTicking();
    await h.run(10_000);
    expect(downs(h)).toEqual([]);
    expect(readyReplicas(h)).toHaveLength(2);
    open();
    await h.until(() => readyReplicas(h).length === 1, 5_000);
    expect(downs(h)).toEqual([["max", 1]]);
    h.loader.close();
  });

  it("not while an adopted model still has a replica known only from the journal (its node not reported yet)", async () => {
    const h = replicaHarness({ min: 0, max: 1, scaleDownAfterMs: 300_000 });
    h.directory.agents.set("n3", h.n2);
    const spec = h.loader.modelSpec("m1")!;
    h.loader.journalReplicas.restore([{ incarnation: "J1", nodeId: "n4", model: "m1", address: "10.0.0.4:5000" }]);
    expect(h.loader.adoptRemoteOnly(spec, "n2", "10.0.0.2:5000", "A1")).toBe(true);
    expect(h.loader.adoptRemoteOnly(spec, "n3", "10.0.0.3:5000", "A2")).toBe(true);
    h.loader.startTicking();
    await h.run(10_000);
    expect(downs(h)).toEqual([]);
    // n4 reports without J1: the count is settled, and above max.
    h.loader.journalReplicas.nodeReported("n4");
    await h.until(() => readyReplicas(h).length === 1, 5_000);
    expect(downs(h)).toEqual([["max", 1]]);
    h.loader.close();
  });

  it("not during a rollout: three replicas, settings changed with max lowered to 1 at once — the rollout steps down itself, one stale replica at a time, and finishes", async () => {
    const h = replicaHarness({ min: 0, max: 3, targetInFlight: 1, scaleDownAfterMs: 600_000 });
    h.loader.startTicking();
    const old = await threeReplicas(h);
    await Promise.all(h.loader.setModels(changed(h, 1)));
    const fewest = await untilOneFresh(h, old);
    expect(fewest).toBe(1);
    expect(downs(h)).toEqual([]);
    expect(h.events.ofType("eviction.stopped").map((e) => e.reason)).toEqual(["rollout", "rollout", "rollout"]);
    h.loader.close();
  });

  it("a rollout of two replicas whose max was lowered to 1 with the settings does not stall: one stale replica goes, then the surge-one swap", async () => {
    const h = replicaHarness({ min: 0, max: 2, targetInFlight: 1, scaleDownAfterMs: 600_000 });
    h.loader.startTicking();
    const old = await twoReplicas(h);
    await Promise.all(h.loader.setModels(changed(h, 1)));
    const fewest = await untilOneFresh(h, old);
    expect(fewest).toBe(1);
    expect(h.events.ofType("eviction.stopped").map((e) => e.reason)).toEqual(["rollout", "rollout"]);
    h.loader.close();
  });

  it("not during a drain move: the replacement and the drained replica both run for a while, and nothing but the drained one stops", async () => {
    const c = drainCluster({ min: 2, max: 2, scaleDownAfterMs: 300_000 }, 3);
    const { h } = c;
    h.loader.startTicking();
    await h.until(() => readyReplicas(h).length === 2);
    const [drained] = readyReplicas(h);
    h.directory.agents.get("n3")!.startScript = () => {}; // the replacement stays loading until the test says
    const d = startDrain(c, "n1");
    await h.until(() => h.loader.core.instancesOfModel("m1").length === 3);
    await h.run(5_000); // ticks while the move runs
    h.directory.agents.get("n3")!.startOf("m1").spawned().ready();
    await h.until(() => d.done());
    await h.run(5_000);
    expect(downs(h)).toEqual([]);
    expect(h.events.ofType("eviction.started").map((e) => [e.incarnation, e.reason])).toEqual([[drained, "drain"]]);
    expect(readyNodes(h).sort()).toEqual(["n2", "n3"]);
    h.loader.close();
  });
});
