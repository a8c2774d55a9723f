import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { deferred } from "./test-fakes.js";
import type { StopAnswer } from "./ports.js";
import { readyReplicas, replicaHarness, split, twoReplicas } from "./replica-test-kit.js";

describe("replica routing", () => {
  it("two replicas on two nodes split the calls in flight", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    expect(h.loader.heldInstance(a)?.nodeId).not.toBe(h.loader.heldInstance(b)?.nodeId);
    // eight calls at once: routed in one turn each, so they spread
    const leases = await Promise.all(Array.from({ length: 8 }, () => h.loader.acquire("m1", h.never)));
    expect(split(leases)).toEqual(new Map([[a, 4], [b, 4]]));
    expect(h.loader.core.inFlight(h.loader.heldInstance(a)?.address ?? "")).toBe(4);
    expect(h.loader.core.inFlight(h.loader.heldInstance(b)?.address ?? "")).toBe(4);
    expect(h.loader.replicaStatus("m1")).toMatchObject({ ready: 2, loading: 0, desired: 2 });
    for (const l of leases) l.complete();
  });

  it("ties go to the least recently used replica", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    await h.run(1_000);
    const first = await h.loader.acquire("m1", h.never);
    first.complete();
    await h.run(1_000);
    const second = await h.loader.acquire("m1", h.never);
    second.complete();
    expect(new Set([first.incarnation, second.incarnation])).toEqual(new Set([a, b]));
  });

  it("a replica pending eviction is skipped while the other serves", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    const nodeA = h.loader.heldInstance(a)?.nodeId === "n1" ? h.n1 : h.n2;
    const gate = deferred<StopAnswer>();
    nodeA.stopScript = () => gate.promise;
    const stop = h.track(h.loader.stopInstance(a, { force: true }));
    await h.flush();
    expect(h.loader.core.instance(a)?.pendingEviction).toBeDefined();
    const leases = await Promise.all([1, 2, 3].map(() => h.loader.acquire("m1", h.never)));
    expect(leases.map((l) => l.incarnation)).toEqual([b, b, b]);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(stop.value().t).toBe("stopped");
    for (const l of leases) l.complete();
  });

  it("a replica on an unreachable node is never chosen; with none reachable and no room the call is UNAVAILABLE", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    const nodeOfB = h.loader.heldInstance(b)?.nodeId ?? "";
    h.directory.unreachable.add(nodeOfB);
    const leases = await Promise.all([1, 2, 3].map(() => h.loader.acquire("m1", h.never)));
    expect(leases.every((l) => l.incarnation === a)).toBe(true);
    for (const l of leases) l.complete();
    h.directory.unreachable.add(h.loader.heldInstance(a)?.nodeId ?? "");
    const err = await h.loader.acquire("m1", h.never).then(
      () => undefined,
      (e: unknown) => WardenError.from(e),
    );
    expect(err?.code).toBe(Code.Unavailable);
  });

  it("a failed stop of one replica leaves the other routable and the failed one registered again", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    h.directory.local.add("n2"); // both local: a failed StopBackend of a live process is row 3
    const [a, b] = await twoReplicas(h);
    const nodeA = h.loader.heldInstance(a)?.nodeId === "n1" ? h.n1 : h.n2;
    nodeA.stopScript = () => new WardenError(Code.Unavailable, "agent hiccup");
    nodeA.isRunningAnswer = () => true;
    const out = await h.loader.stopInstance(a, { force: true });
    expect(out).toMatchObject({ t: "registered-again", incarnation: a });
    expect(h.loader.core.instance(b)?.state).toBe("ready");
    expect(h.loader.core.instance(b)?.pendingEviction).toBeUndefined();
    expect(readyReplicas(h).sort()).toEqual([a, b].sort());
    const leases = await Promise.all([1, 2].map(() => h.loader.acquire("m1", h.never)));
    expect(new Set(leases.map((l) => l.incarnation))).toEqual(new Set([a, b]));
    for (const l of leases) l.complete();
  });

  it("unload stops every replica, each through its own stop sequence, and reports the worst outcome with each replica's", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    const nodeB = h.loader.heldInstance(b)?.nodeId === "n1" ? h.n1 : h.n2;
    nodeB.stopScript = () => new WardenError(Code.Unavailable, "agent hiccup");
    nodeB.isRunningAnswer = () => true;
    const out = await h.loader.unload("m1", { force: true });
    const nodeOfB = h.loader.heldInstance(b)?.nodeId;
    // a (on whichever node) stopped; b's failure is its own
    expect(h.loader.heldInstance(a)).toBeUndefined();
    expect(out.replicas?.map((r) => r.t).sort()).toEqual([nodeOfB === "n1" ? "registered-again" : "leftover", "stopped"].sort());
    expect(out.t).not.toBe("stopped");
    expect(h.events.ofType("eviction.started").map((e) => e.incarnation).sort()).toEqual([a, b].sort());
  });
});
