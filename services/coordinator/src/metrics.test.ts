import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createWatchdogCore } from "@warden/watchdog";
import type { Loader } from "@warden/loader";
import type { Outbox } from "@warden/outbox";
import { CoordinatorMetrics } from "./metrics.js";
import type { NodeRegistry } from "./nodes/node-registry.js";

/** A real watchdog core behind the few loader reads the scrape makes. */
function metricsOver(perNode: readonly number[]) {
  const core = createWatchdogCore({ clock: { now: () => 0 }, loader: { hasModelAtAddress: () => true }, policy: {} });
  perNode.forEach((count, n) => {
    for (let i = 0; i < count; i++) core.registerReady({ nodeId: `n${String(n)}`, model: `m${String(i)}`, incarnation: `inc-${String(n)}-${String(i)}`, address: `10.0.${String(n)}.${String(i)}:5000`, sizeBytes: 1 });
  });
  const loader = { core, leftoverList: () => [{ nodeId: "n0", stuck: false }], replicaStatuses: () => [], loadJobCounts: () => ({ waiting: 0, loading: 0, failed: 0 }) } as unknown as Loader;
  const nodes = { list: () => [{ nodeId: "n1", state: "ready", orphans: [{}, {}] }, { nodeId: "n0", state: "ready", orphans: [] }] } as unknown as NodeRegistry;
  const outbox = { stats: () => ({ depth: 0, dropped: 0 }) } as unknown as Outbox;
  return { core, metrics: new CoordinatorMetrics(loader, nodes, outbox) };
}

describe("CoordinatorMetrics instance gauges", () => {
  it("one series per node and state with its count, and in-flight calls summed per node", async () => {
    const { core, metrics } = metricsOver([3, 1]);
    core.trackRequest("10.0.0.0:5000");
    core.trackRequest("10.0.0.1:5000");
    core.trackRequest("10.0.1.0:5000");
    const text = await metrics.registry.metrics();
    const lines = (name: string): string[] => text.split("\n").filter((l) => l.startsWith(`${name}{`)).sort();
    expect(lines("warden_instances")).toEqual(['warden_instances{node="n0",state="leftover"} 1', 'warden_instances{node="n0",state="ready"} 3', 'warden_instances{node="n1",state="orphan"} 2', 'warden_instances{node="n1",state="ready"} 1']);
    expect(lines("warden_in_flight_requests")).toEqual(['warden_in_flight_requests{node="n0"} 2', 'warden_in_flight_requests{node="n1"} 1']);
  });
});

/** The two per-node gauges as computed before (one view per instance from core.instances()): the reference. */
function seriesBefore(core: ReturnType<typeof createWatchdogCore>, leftovers: readonly { nodeId: string }[], orphans: ReadonlyMap<string, number>): string[] {
  const counts = new Map<string, Map<string, number>>();
  const add = (node: string, state: string, n: number): void => {
    let byState = counts.get(node);
    if (byState === undefined) counts.set(node, (byState = new Map<string, number>()));
    byState.set(state, (byState.get(state) ?? 0) + n);
  };
  const inFlight = new Map<string, number>();
  for (const v of core.instances()) {
    add(v.nodeId, v.pendingEviction !== undefined ? "pending" : v.state, 1);
    inFlight.set(v.nodeId, (inFlight.get(v.nodeId) ?? 0) + v.inFlight);
  }
  for (const l of leftovers) add(l.nodeId, "leftover", 1);
  for (const [node, n] of orphans) add(node, "orphan", n);
  const out: string[] = [];
  for (const [node, byState] of counts) for (const [state, n] of byState) out.push(`warden_instances{node="${node}",state="${state}"} ${String(n)}`);
  for (const [node, n] of inFlight) out.push(`warden_in_flight_requests{node="${node}"} ${String(n)}`);
  return out.sort();
}

describe("CoordinatorMetrics per-node gauges", () => {
  it("show the same series as one view per instance did (fast-check over random clusters: loading, ready, pending, freed, calls in flight, leftovers, orphans)", async () => {
    const instance = fc.record({ node: fc.nat(5), how: fc.constantFrom("loading" as const, "ready" as const, "pending" as const, "freed" as const), calls: fc.nat(3) });
    await fc.assert(
      fc.asyncProperty(fc.array(instance, { maxLength: 40 }), fc.array(fc.nat(5), { maxLength: 4 }), fc.array(fc.nat(5), { maxLength: 3 }), async (list, leftoverNodes, orphanNodes) => {
        const core = createWatchdogCore({ clock: { now: () => 0 }, loader: { hasModelAtAddress: () => true }, policy: {} });
        list.forEach((x, i) => {
          const spec = { nodeId: `n${String(x.node)}`, model: `m${String(i % 3)}`, incarnation: `inc-${String(i)}`, address: `10.0.${String(x.node)}.${String(i)}:5000`, sizeBytes: 1 };
          if (x.how === "loading") core.registerLoading(spec);
          else core.registerReady(spec);
          for (let c = 0; c < x.calls; c++) core.trackRequest(spec.address);
          if (x.how === "pending" || x.how === "freed") core.selectExplicit(spec.incarnation, { reason: "admin", force: true });
          // Freed: Free answered, the local stop failed (the record stays, never routable).
          if (x.how === "freed") core.settle(spec.incarnation, { t: "failed", message: "stop failed", freed: true });
        });
        const leftovers = leftoverNodes.map((n) => ({ nodeId: `n${String(n)}`, stuck: false }));
        const orphans = new Map<string, number>();
        for (const n of orphanNodes) orphans.set(`n${String(n)}`, (orphans.get(`n${String(n)}`) ?? 0) + 1);
        const loader = { core, leftoverList: () => leftovers, replicaStatuses: () => [], loadJobCounts: () => ({ waiting: 0, loading: 0, failed: 0 }) } as unknown as Loader;
        const nodes = { list: () => [...orphans].map(([nodeId, k]) => ({ nodeId, state: "ready", orphans: Array.from({ length: k }, () => ({})) })) } as unknown as NodeRegistry;
        const outbox = { stats: () => ({ depth: 0, dropped: 0 }) } as unknown as Outbox;
        const text = await new CoordinatorMetrics(loader, nodes, outbox).registry.metrics();
        const lines = text.split("\n").filter((l) => l.startsWith("warden_instances{") || l.startsWith("warden_in_flight_requests{")).sort();
        expect(lines).toEqual(seriesBefore(core, leftovers, orphans));
      }),
      { numRuns: 100, seed: 43 },
    );
  });
});
