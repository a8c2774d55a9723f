/**
 * Drain with replicas ("drain moves replicas one at a time without
 * dropping below min where room exists") over real processes: a coordinator
 * (in this test process, no embedded agent), three agent processes that
 * spawn real backend-sim processes, real loopback gRPC. Every wait is on an
 * event or a condition; the ready count is followed on the event stream.
 */
import { describe, expect, it } from "vitest";
import { EvictionReason, NodeState, type Event } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { startRemoteAgent } from "./support/agent-process.js";
import { runningBackends } from "./support/chaos-checks.js";
import { startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { replicaCluster } from "./support/replica-cluster.js";
import { recordingLogger } from "./support/recording-logger.js";
import { instancesOf, readyOf, replicaModel } from "./support/replica-calls.js";

const cl = replicaCluster("replicas-drain");
const { tag } = cl;

async function addNodes(t: TestCoordinator, ids: readonly string[]): Promise<void> {
  cl.agents.push(...(await Promise.all(ids.map((nodeId) => startRemoteAgent({ coordinator: t.c.address, nodeId, tag, config: {} })))));
  await until(`${ids.join(", ")} ready`, async () => (await t.admin.listNodes({})).nodes.filter((n) => ids.includes(n.nodeId) && n.state === NodeState.READY).length === ids.length, 60_000);
}

/** Events that end a replica's readiness: from its stop's start on it serves no new call. */
const notReady = new Set(["eviction.started", "eviction.stopped", "eviction.failed", "backend.exited", "backend.load-failed", "instance.forgotten"]);

/** The model's ready count after each of its events, from the stream: +1 at backend.loaded, −1 at the first event that ends it. */
function readyCounts(events: readonly Event[], model: string): number[] {
  const ready = new Set<string>();
  const out: number[] = [];
  for (const e of events) {
    if (e.model !== model) continue;
    const type = eventTypeOf(e);
    if (type === "backend.loaded") ready.add(e.incarnation);
    else if (notReady.has(type)) ready.delete(e.incarnation);
    else continue;
    out.push(ready.size);
  }
  return out;
}

describe("drain with replicas over real processes", { timeout: 240_000 }, () => {
  it("drain of a node holding a min 2 replica: the replacement on the third node is ready before the drained one's stop begins, the ready count never drops below 2, the node ends empty", async () => {
    const logger = recordingLogger();
    const t = (cl.tc = await startTestCoordinator({ embeddedAgent: false, models: [replicaModel("m", { min: 2, max: 2 }, { spread: "node" })], policy: {}, extra: {}, logger }));
    // Two nodes first: spread node puts one replica on each. The third joins empty.
    await addNodes(t, ["a", "b"]);
    const two = await until("two ready replicas", async () => ((await readyOf(t.admin, "m")).length === 2 ? readyOf(t.admin, "m") : undefined), 90_000);
    expect(two.map((i) => i.nodeId)).toEqual(["a", "b"]);
    await addNodes(t, ["c"]);
    const drained = two[0]!;

    await t.admin.drainNode({ nodeId: "a" });
    await t.waitForEvent("node.drained", (e) => e.nodeId === "a", 120_000);
    const up = t.events.find((e) => e.model === "m" && e.payload.case === "replicaScaledUp" && e.payload.value.cause === "drain");
    if (up === undefined) throw new Error(`no replacement started for the drain; events: ${t.events.map((e) => eventTypeOf(e)).join(", ")}; warnings: ${JSON.stringify(logger.matching("warn", /drain|replica/))}`);
    expect(up.nodeId).toBe("c");

    const at = (type: string, inc: string): number => t.events.findIndex((e) => eventTypeOf(e) === type && e.incarnation === inc);
    expect(at("backend.loaded", up.incarnation)).toBeGreaterThanOrEqual(0);
    expect(at("backend.loaded", up.incarnation)).toBeLessThan(at("eviction.started", drained.incarnation));
    const stopped = await t.waitForEvent("eviction.stopped", (e) => e.incarnation === drained.incarnation, 60_000);
    expect(stopped.payload.case === "evictionStopped" ? stopped.payload.value.reason : undefined).toBe(EvictionReason.DRAIN);
    // From the moment both were first ready, never fewer than 2.
    const counts = readyCounts(t.events, "m");
    expect(Math.min(...counts.slice(counts.indexOf(2)))).toBe(2);
    expect(counts.at(-1)).toBe(2);

    // The drained node ends empty: in ListModels, and in ground truth (no backend-sim process of it).
    expect((await instancesOf(t.admin, "m")).map((i) => i.nodeId)).toEqual(["b", "c"]);
    expect((await readyOf(t.admin, "m")).map((i) => [i.nodeId, i.incarnation])).toEqual([["b", two[1]!.incarnation], ["c", up.incarnation]]);
    await until("no backend on a", async () => !(await runningBackends(tag)).some((r) => r.nodeId === "a"), 60_000);
    const node = (await t.admin.listNodes({})).nodes.find((n) => n.nodeId === "a");
    expect([node?.draining, node?.instanceCount]).toEqual([true, 0]);
  });
});
