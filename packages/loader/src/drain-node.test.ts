import { describe, expect, it } from "vitest";
import { drainCluster, onNode, readyNodes, startDrain, type DrainCluster } from "./drain-test-kit.js";
import type { ReplicaSettings } from "./model-spec.js";
import { readyReplicas } from "./replica-test-kit.js";
import type { Harness } from "./test-fakes.js";

/** A cluster with m1's `min` replicas ready (placed n1 first), the reconciler ticking. */
async function ready(replicas: Partial<ReplicaSettings>, nodeCount: number, perNode = 1): Promise<DrainCluster> {
  const c = drainCluster(replicas, nodeCount, perNode);
  c.h.loader.startTicking();
  await c.h.until(() => readyReplicas(c.h).length === (replicas.min ?? 0));
  return c;
}

function index(h: Harness, type: string, incarnation: string): number {
  return h.events.list.findIndex((e) => e.type === type && e.incarnation === incarnation);
}

const drainUps = (h: Harness) => h.events.ofType("replica.scaled-up").filter((e) => e.cause === "drain");

describe("drain with replicas", () => {
  it("moves a min 2 replica: the replacement on another node is ready before the drained one's stop begins, never below min, the node ends empty", async () => {
    const c = await ready({ min: 2, max: 2 }, 3);
    const { h } = c;
    expect(readyNodes(h)).toEqual(["n1", "n2"]);
    const [drained] = readyReplicas(h);
    const d = startDrain(c, "n1");
    await h.until(() => d.done());
    const [up] = drainUps(h);
    expect(up?.nodeId).toBe("n3");
    expect(up?.replicas).toBe(3);
    expect(index(h, "backend.loaded", up?.incarnation ?? "")).toBeLessThan(index(h, "eviction.started", drained ?? ""));
    expect(h.events.ofType("eviction.stopped").map((e) => [e.incarnation, e.reason])).toEqual([[drained, "drain"]]);
    expect(c.seen.minReadyAtDrainStop).toBe(2);
    expect(c.seen.maxCountedOffDraining).toBeLessThanOrEqual(2);
    expect(onNode(h, "n1")).toEqual([]);
    expect(readyNodes(h).sort()).toEqual(["n2", "n3"]);
    expect(h.warnings).toEqual([]);
    h.loader.close();
  });

  it("a replica above min is stopped without a replacement", async () => {
    const c = await ready({ min: 2, max: 2 }, 3);
    c.h.loader.scale("m1", { min: 1 }, "test");
    const d = startDrain(c, "n1");
    await c.h.until(() => d.done());
    expect(drainUps(c.h)).toEqual([]);
    expect(readyNodes(c.h)).toEqual(["n2"]);
    expect(c.seen.minReadyAtDrainStop).toBe(1);
    c.h.loader.close();
  });

  it("two replicas on the draining node move one at a time, each replacement ready before its stop", async () => {
    const c = await ready({ min: 2, max: 2 }, 2, 2);
    const { h } = c;
    expect(readyNodes(h)).toEqual(["n1", "n1"]);
    const [a, b] = readyReplicas(h);
    const d = startDrain(c, "n1");
    await h.until(() => d.done());
    const ups = drainUps(h);
    expect(ups.map((e) => e.nodeId)).toEqual(["n2", "n2"]);
    const [u1, u2] = ups.map((e) => e.incarnation);
    // loaded(u1) < stop(a) < scaled-up(u2) < loaded(u2) < stop(b): one move at a time.
    const order = [index(h, "backend.loaded", u1 ?? ""), index(h, "eviction.started", a ?? ""), index(h, "replica.scaled-up", u2 ?? ""), index(h, "backend.loaded", u2 ?? ""), index(h, "eviction.started", b ?? "")];
    expect(order.every((x) => x >= 0)).toBe(true);
    expect([...order].sort((x, y) => x - y)).toEqual(order);
    expect(c.seen.minReadyAtDrainStop).toBe(2);
    expect(onNode(h, "n1")).toEqual([]);
    h.loader.close();
  });

  it("no room elsewhere: the drained replica is stopped as before, the log says so, and the breaker reports the floor it cannot restore", async () => {
    const c = await ready({ min: 2, max: 2 }, 2);
    const { h } = c;
    const d = startDrain(c, "n1");
    await h.until(() => d.done());
    expect(drainUps(h)).toEqual([]);
    expect(h.warnings.filter((w) => w.startsWith("drain: no room"))).toHaveLength(1);
    expect(onNode(h, "n1")).toEqual([]);
    expect(readyNodes(h)).toEqual(["n2"]);
    await h.until(() => h.events.ofType("replica.scale-blocked").length > 0);
    h.loader.close();
  });

  it("a replacement that fails to load opens the breaker; the drained replica is then stopped (fallback)", async () => {
    const c = await ready({ min: 2, max: 2 }, 3);
    const { h } = c;
    const n3 = h.directory.agents.get("n3") as unknown as { startScript: (s: { spawned(): { failed(m: string): unknown } }) => void };
    n3.startScript = (s) => void s.spawned().failed("out of memory");
    const d = startDrain(c, "n1");
    await h.until(() => d.done());
    expect(drainUps(h).map((e) => e.nodeId)).toEqual(["n3"]);
    expect(h.events.ofType("replica.scale-blocked")).toHaveLength(1);
    expect(h.warnings.filter((w) => w.startsWith("drain: no room"))).toHaveLength(1);
    expect(onNode(h, "n1")).toEqual([]);
    h.loader.close();
  });

  it("a node that has not reported its inventory defers the replacement: the drain waits and moves it once it has", async () => {
    const c = await ready({ min: 2, max: 2 }, 3);
    const { h } = c;
    h.inventory.answers.set("m1", { t: "unknown", reason: 'node "n3" has not reported an inventory yet', noInventoryYet: true });
    const d = startDrain(c, "n1");
    // The kit's retry interval is 100 ms and it allows 2 deferrals: the first one is being waited out.
    await h.run(50);
    expect([d.done(), drainUps(h).length, h.events.ofType("eviction.started").length]).toEqual([false, 0, 0]);
    h.inventory.answers.delete("m1");
    await h.until(() => d.done());
    expect(h.warnings).toEqual([]);
    expect(drainUps(h).map((e) => e.nodeId)).toEqual(["n3"]);
    expect(c.seen.minReadyAtDrainStop).toBe(2);
    expect(drainUps(h).map((e) => e.nodeId)).toEqual(["n3"]);
    expect(c.seen.minReadyAtDrainStop).toBe(2);
    expect(h.warnings).toEqual([]);
    h.loader.close();
  });

  it("undrained during a move: the drained replica stays where it is", async () => {
    const c = await ready({ min: 2, max: 2 }, 3);
    const { h } = c;
    const n3 = h.directory.agents.get("n3") as unknown as { startScript: (s: { spawned(): unknown; ready(): unknown }) => void };
    let finish: (() => void) | undefined;
    n3.startScript = (s) => {
      s.spawned();
      finish = () => void s.ready();
    };
    const d = startDrain(c, "n1");
    await h.until(() => finish !== undefined);
    c.draining.delete("n1");
    finish?.();
    await h.until(() => d.done());
    expect(h.events.ofType("eviction.started")).toEqual([]);
    expect(readyNodes(h)).toEqual(["n1", "n2", "n3"]);
    h.loader.close();
  });
});
