/**
 * Chaos, real processes (fault F4): the agent is killed with
 * SIGKILL while the StopBackend of a *group* eviction is in flight on it (the
 * backend ignores SIGTERM and the agent's grace is long, so the kill lands
 * mid-stop; the load that wanted the group is waiting on it). The stop's
 * outcome is unknown: the victim becomes a leftover — accounted, never
 * routable, still blocking its group — and the waiting load must not start a
 * second member of the group beside it. The agent comes back on the same
 * state dir, the leftover is reaped, the load completes, and the cluster
 * converges: Admin API = processes that really run, audit trail complete.
 */
import { describe, expect, it } from "vitest";
import { InstanceState } from "@warden/proto";
import { accountingProblems, observe, watchAccounting } from "./support/chaos-checks.js";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import { expectReapedThenReplaced, untilStopRecorded } from "./support/chaos-leftover.js";
import { simModel } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

describe("chaos: agent killed (SIGKILL) during an eviction's StopBackend", { timeout: 180_000 }, () => {
  it("group eviction: the victim is a leftover that blocks its group (no second member starts) until the restarted agent lets it be reaped; then converged, audit complete", async () => {
    const c = await chaos.start({
      name: "chaos-agent-kill",
      models: [simModel("m1", { groups: ["g"], knobs: { ignore_sigterm: true }, memoryEstimate: "1GiB" }), simModel("m2", { groups: ["g"], memoryEstimate: "1GiB" })],
      // The StopBackend stays in flight (SIGTERM ignored, 120 s grace) until the agent dies.
      config: { stop: { timeout: "60s", rpcTimeout: "60s" } },
    });
    const a = await c.addAgent("a", { grace: "120s" });
    // Everything that runs stays accounted at every observation, through the faults.
    const watch = watchAccounting(() => c.admin, c.tag);
    const m1 = (await c.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(m1).not.toBe("");
    const [m1Pid] = await a.liveBackends();

    // Loading m2 evicts m1 (group g): StopBackend reaches the agent and hangs in its grace.
    let m2Done = false;
    const m2Load = c.admin.loadModel({ model: "m2" }, { timeoutMs: 170_000 }).finally(() => {
      m2Done = true;
    });
    await c.coord.waitForEvent("eviction.started", (e) => e.incarnation === m1, 60_000);
    await untilStopRecorded(a.stateDir, m1);
    await a.kill();

    // Unknown outcome → leftover, still running, still accounted; m2 waits (group conflict with the leftover).
    const failed = await c.coord.waitForEvent("eviction.failed", (e) => e.incarnation === m1, 60_000);
    expect(failed["evictionFailed"]).toMatchObject({ outcome: "EVICTION_FAILED_OUTCOME_LEFTOVER", reason: "EVICTION_REASON_GROUP" });
    const during = await observe(c.admin, c.tag);
    expect(during.running.map((r) => r.pid)).toEqual([m1Pid]);
    expect(during.rows.map((r) => [r.model, r.incarnation, r.state])).toEqual([["m1", m1, InstanceState.LEFTOVER]]);
    expect(accountingProblems(during)).toEqual([]);
    expect(m2Done).toBe(false);

    await a.restart();
    await expectReapedThenReplaced(c, m1, m2Load, watch);
  });
});
