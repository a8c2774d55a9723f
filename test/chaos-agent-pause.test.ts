/**
 * Chaos, real processes (faults F2/F3/F6): the agent is
 * frozen with SIGSTOP while the StopBackend of an LRU eviction is running on
 * it (the backend ignores SIGTERM, the agent's grace is long), and thawed with
 * SIGCONT later. While frozen the stop's outcome is unknown and the node goes
 * unreachable: the victim must stay accounted (a leftover, never routable,
 * still counting toward the node's limit) and nothing is declared gone; the
 * load that wanted the slot waits. After SIGCONT the agent answers again (its
 * old stop and the coordinator's retries arrive late), the leftover is
 * reaped, the load completes and the cluster converges with the audit trail
 * complete.
 */
import { describe, expect, it } from "vitest";
import { InstanceState, NodeState } from "@warden/proto";
import { accountingProblems, observe, watchAccounting } from "./support/chaos-checks.js";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import { expectReapedThenReplaced, untilStopRecorded } from "./support/chaos-leftover.js";
import { simModel } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

describe("chaos: agent frozen (SIGSTOP) during an eviction's StopBackend, then SIGCONT", { timeout: 180_000 }, () => {
  it("LRU eviction: leftover accounted and counted toward the limit on an unreachable node, nothing declared gone; after SIGCONT reaped, the waiting load completes; converged, audit complete", async () => {
    const c = await chaos.start({
      name: "chaos-agent-pause",
      models: [simModel("m1", { knobs: { ignore_sigterm: true }, memoryEstimate: "1GiB" }), simModel("m2", { memoryEstimate: "1GiB" })],
      config: {
        policy: { tickInterval: "100ms", enforcementRetries: 600, enforcementRetryInterval: "250ms", limitPerNode: 1 },
        // The waiting load outlasts the freeze (its only node unreachable: a transient wait).
        loadWait: "150s",
        stop: { timeout: "10s", rpcTimeout: "2s" },
        // Unreachable soon after the freeze; never lost by timeout within the test.
        nodeGrace: "2s",
        nodeLostAfter: "1h",
      },
    });
    const a = await c.addAgent("a", { grace: "120s" });
    // Everything that runs stays accounted at every observation, through the faults.
    const watch = watchAccounting(() => c.admin, c.tag);
    const m1 = (await c.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(m1).not.toBe("");
    const [m1Pid] = await a.liveBackends();

    // Loading m2 evicts m1 (LRU, limit 1): StopBackend reaches the agent, which sends SIGTERM (ignored) and waits its grace.
    let m2Done = false;
    const m2Load = c.admin.loadModel({ model: "m2" }, { timeoutMs: 170_000 }).finally(() => {
      m2Done = true;
    });
    await untilStopRecorded(a.stateDir, m1);
    // Only an unreachable logged after the pause counts (a loaded machine can make the 2 s grace flap before it).
    const beforePause = c.coord.events.length;
    a.pause();
    const failed = await c.coord.waitForEvent("eviction.failed", (e) => e.incarnation === m1, 60_000);
    expect(failed["evictionFailed"]).toMatchObject({ outcome: "EVICTION_FAILED_OUTCOME_LEFTOVER", reason: "EVICTION_REASON_LRU" });
    await c.coord.waitForEvent("node.unreachable", (e) => e.nodeId === "a" && c.coord.events.indexOf(e) >= beforePause, 60_000);
    // A retry times out against the frozen agent: still a leftover, never counted as stopped.
    await c.coord.waitForEvent("eviction.retried", (e) => e.incarnation === m1, 60_000);
    const during = await observe(c.admin, c.tag);
    expect(during.running.map((r) => r.pid)).toEqual([m1Pid]);
    expect(during.rows.map((r) => [r.model, r.incarnation, r.state, r.node])).toEqual([["m1", m1, InstanceState.LEFTOVER, "a"]]);
    expect(during.nodes.map((n) => [n.node, n.state, n.instanceCount])).toEqual([["a", NodeState.UNREACHABLE, 1]]);
    expect(accountingProblems(during)).toEqual([]);
    expect(m2Done).toBe(false);
    expect(c.logged().filter((e) => e.type === "eviction.stopped" || e.type === "leftover.reaped" || e.type === "node.lost")).toEqual([]);

    a.resume();
    await expectReapedThenReplaced(c, m1, m2Load, watch);
  });
});
