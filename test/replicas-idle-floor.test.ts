/**
 * The idle watchdog never takes a model below `min`, over real
 * processes: a coordinator (in this test process, no embedded agent), one
 * agent process spawning real backend-sim processes, real loopback gRPC.
 * A min 0 model with the same short idle timeout is idle-evicted again and
 * again in the same run: each of its evictions is a watchdog tick at which
 * the min 1 model had been idle past its timeout too — the test waits on
 * those events, never on a timer, and fails if the floor is not kept.
 */
import { describe, expect, it } from "vitest";
import { EvictionReason, InstanceState, NodeState } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { startRemoteAgent } from "./support/agent-process.js";
import { startTestCoordinator, until } from "./support/coordinator-harness.js";
import { replicaCluster } from "./support/replica-cluster.js";
import { instancesOf, readyOf, replicaModel, summaryOf } from "./support/replica-calls.js";

const cl = replicaCluster("replicas-idle");
const { tag } = cl;

describe("idle floor over real processes", { timeout: 240_000 }, () => {
  it("a min 1 model with a 1 s idle timeout stays loaded (same incarnation, never evicted) through three idle evictions of a min 0 model with the same timeout", async () => {
    const models = [replicaModel("keep", { min: 1, max: 1 }, { idleTimeout: "1s" }), replicaModel("gone", { min: 0, max: 1 }, { idleTimeout: "1s" })];
    const t = (cl.tc = await startTestCoordinator({ embeddedAgent: false, models, policy: {}, extra: {} }));
    cl.agents.push(await startRemoteAgent({ coordinator: t.c.address, nodeId: "a", tag, config: {} }));
    await until("a ready", async () => (await t.admin.listNodes({})).nodes.some((n) => n.nodeId === "a" && n.state === NodeState.READY), 60_000);
    const [keep] = await until("keep's min replica ready", async () => {
      const r = await readyOf(t.admin, "keep");
      return r.length === 1 ? r : undefined;
    }, 90_000);
    const keepInc = keep!.incarnation;

    const evicted: string[] = [];
    for (let round = 0; round < 3; round++) {
      await t.admin.loadModel({ model: "gone" });
      const loaded = await t.waitForEvent("backend.loaded", (e) => e.model === "gone" && !evicted.includes(e.incarnation), 60_000);
      // Idle for its 1 s timeout after it became ready: by then keep, idle since before it, is past the same timeout.
      const stopped = await t.waitForEvent("eviction.stopped", (e) => e.incarnation === loaded.incarnation, 60_000);
      expect(stopped.payload.case === "evictionStopped" ? stopped.payload.value.reason : undefined).toBe(EvictionReason.IDLE);
      evicted.push(loaded.incarnation);
    }

    expect(t.events.filter((e) => e.incarnation === keepInc).map((e) => eventTypeOf(e))).toEqual(["replica.scaled-up", "backend.loaded"]);
    expect((await instancesOf(t.admin, "keep")).map((i) => [i.incarnation, i.state, i.pendingEviction])).toEqual([[keepInc, InstanceState.READY, false]]);
    expect(await instancesOf(t.admin, "gone")).toEqual([]);
    const s = await summaryOf(t.admin, "keep");
    expect([s.ready, s.min]).toEqual([1, 1]);
  });
});
