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
