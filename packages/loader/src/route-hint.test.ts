import { describe, expect, it } from "vitest";
import { deferred } from "./test-fakes.js";
import type { StopAnswer } from "./ports.js";
import type { RouteCandidate, RouteHint } from "./loader-types.js";
import { replicaHarness, twoReplicas } from "./replica-test-kit.js";

/** A hint that always names `target` and records what it was offered. */
function hintFor(target: () => string): RouteHint & { offered: RouteCandidate[][] } {
  const offered: RouteCandidate[][] = [];
  return {
    offered,
    prefer(candidates) {
      offered.push([...candidates]);
      return target();
    },
  };
}

describe("route hints (prefix-affinity routing's say in the pick)", () => {
  it("a call goes to the replica its hint names, even when it is not the least loaded", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    const hint = hintFor(() => a);
    const leases = await Promise.all([1, 2, 3].map(() => h.loader.acquire("m1", h.never, hint)));
    expect(leases.map((l) => l.incarnation)).toEqual([a, a, a]);
    // Offered both, with their in-flight counts as the calls pile up.
    expect(hint.offered.map((c) => c.map((x) => x.incarnation).sort())).toEqual([[a, b].sort(), [a, b].sort(), [a, b].sort()]);
    expect(hint.offered[2]?.find((x) => x.incarnation === a)?.inFlight).toBe(2);
    for (const l of leases) l.complete();
  });

  it("a hint naming no candidate leaves the default pick", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    const leases = await Promise.all([1, 2].map(() => h.loader.acquire("m1", h.never, hintFor(() => "not-a-replica"))));
    expect(new Set(leases.map((l) => l.incarnation))).toEqual(new Set([a, b]));
    for (const l of leases) l.complete();
  });

  it("a replica pending eviction is never offered, so a hint cannot route to it", async () => {
    const h = replicaHarness({ max: 2, targetInFlight: 1 });
    const [a, b] = await twoReplicas(h);
    const nodeA = h.loader.heldInstance(a)?.nodeId === "n1" ? h.n1 : h.n2;
    const gate = deferred<StopAnswer>();
    nodeA.stopScript = () => gate.promise;
    const stop = h.track(h.loader.stopInstance(a, { force: true }));
    await h.flush();
    expect(h.loader.core.instance(a)?.pendingEviction).toBeDefined();
    const hint = hintFor(() => a);
    const leases = await Promise.all([1, 2].map(() => h.loader.acquire("m1", h.never, hint)));
    expect(leases.map((l) => l.incarnation)).toEqual([b, b]);
    // One routable replica: no choice to make, the hint is not asked.
    expect(hint.offered).toEqual([]);
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(stop.value().t).toBe("stopped");
    for (const l of leases) l.complete();
  });
});
