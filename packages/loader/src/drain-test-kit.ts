import { FakeAgent } from "./fake-agent.js";
import type { LoaderEvent } from "./loader-event.js";
import type { ReplicaSettings } from "./model-spec.js";
import { readyReplicas, replicaHarness } from "./replica-test-kit.js";
import type { Harness } from "./test-fakes.js";

/** What a drain test changes as it goes: nodes draining, nodes with no room. Not exported from the package. */
export interface DrainCluster {
  readonly h: Harness;
  readonly nodes: readonly string[];
  readonly draining: Set<string>;
  /** Nodes placement treats as having no room (memory, budget, anything). */
  readonly full: Set<string>;
  /** What each check saw: the lowest ready count at a drain stop, the highest count off draining nodes at a scale-up. */
  readonly seen: { minReadyAtDrainStop: number; maxCountedOffDraining: number };
}

/**
 * m1 with `replicas` on nodes n1…n`nodeCount` (n1 the embedded agent, the
 * others remote), placed by a fake that does what the cluster's placement
 * does for a drain: never a draining or full node, at most `perNode`
 * replicas of m1 (any state, leftovers included) on a node, the first such
 * node in order.
 */
export function drainCluster(replicas: Partial<ReplicaSettings>, nodeCount: number, perNode = 1): DrainCluster {
  const h = replicaHarness(replicas, { enforcement: { maxAttempts: 2, intervalMs: 100 } });
  const nodes = Array.from({ length: nodeCount }, (_, i) => `n${String(i + 1)}`);
  for (const id of nodes.slice(2)) h.directory.agents.set(id, new FakeAgent(id, h.log, h.frees));
  const draining = new Set<string>();
  const full = new Set<string>();
  h.placement.choose = (spec) => {
    h.placement.calls.push(spec.id);
    const count = new Map<string, number>();
    for (const v of h.loader.core.instancesOfModel(spec.id)) count.set(v.nodeId, (count.get(v.nodeId) ?? 0) + 1);
    for (const l of h.loader.leftoverList()) if (l.model === spec.id) count.set(l.nodeId, (count.get(l.nodeId) ?? 0) + 1);
    const nodeId = nodes.find((id) => !draining.has(id) && !full.has(id) && (count.get(id) ?? 0) < perNode);
    return nodeId === undefined ? { nodeId: undefined, reason: "no node has room for another replica" } : { nodeId };
  };
  const seen = { minReadyAtDrainStop: Infinity, maxCountedOffDraining: 0 };
  const check = (e: LoaderEvent): void => {
    if (e.model !== "m1") return;
    // The victim is already pending here: what is left is what serves.
    if (e.type === "eviction.started" && e.reason === "drain") seen.minReadyAtDrainStop = Math.min(seen.minReadyAtDrainStop, readyReplicas(h).length);
    if (e.type === "replica.scaled-up") seen.maxCountedOffDraining = Math.max(seen.maxCountedOffDraining, countedOffDraining(h, draining));
  };
  const emit = h.events.emit.bind(h.events);
  h.events.emit = (e) => {
    check(e);
    emit(e);
  };
  const durable = h.events.emitDurable.bind(h.events);
  h.events.emitDurable = (e) => {
    check(e);
    return durable(e);
  };
  return { h, nodes, draining, full, seen };
}

/** m1's instances off draining nodes that count toward max: every state but freed (a pending one may be registered again). */
export function countedOffDraining(h: Harness, draining: ReadonlySet<string>): number {
  return h.loader.core.instancesOfModel("m1").filter((v) => !draining.has(v.nodeId) && v.state !== "freed").length;
}

/** Nodes of m1's ready replicas, in the order of their incarnations. */
export function readyNodes(h: Harness): string[] {
  return readyReplicas(h).map((inc) => h.loader.core.instance(inc)?.nodeId ?? "?");
}

/** Anything the loader still accounts on a node: instances in any state and leftovers. */
export function onNode(h: Harness, nodeId: string): string[] {
  return [...h.loader.core.instances().filter((v) => v.nodeId === nodeId).map((v) => v.incarnation), ...h.loader.leftoverList().filter((l) => l.nodeId === nodeId).map((l) => l.incarnation)];
}

/** Starts a drain of `nodeId` (marked draining for placement, as DrainNode does) and tracks it. */
export function startDrain(c: DrainCluster, nodeId: string, force = false): ReturnType<Harness["track"]> {
  c.draining.add(nodeId);
  return c.h.track(c.h.loader.drainNode(nodeId, { force, stillDraining: () => c.draining.has(nodeId) }));
}
