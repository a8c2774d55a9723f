/**
 * Chaos, real processes (fault F8 with F6): the coordinator
 * is killed with SIGKILL while an eviction's StopBackend is in flight to a
 * partitioned node (agent frozen with SIGSTOP), so the eviction has started
 * and never settled. The restarted coordinator must account the instance from
 * its journal (a leftover, never routable) before the node returns, reap it
 * when it does, and the audit trail must still close that eviction: started →
 * exactly one stopped/failed, per instance in sequence order, nothing lost.
 */
import { describe, expect, it } from "vitest";
import { InstanceState } from "@warden/proto";
import { observe, typesOf, untilAuditComplete, untilConverged, watchAccounting, accountingProblems } from "./support/chaos-checks.js";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import { simModel, until } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

describe("chaos: coordinator killed (SIGKILL) mid-eviction, its node partitioned", { timeout: 180_000 }, () => {
  it("the unsettled eviction is a leftover of the restarted coordinator from the start, reaped when the node returns; the audit trail closes it; converged", async () => {
    const c = await chaos.start({
      name: "chaos-coord-kill",
      models: [simModel("m", { memoryEstimate: "1GiB" })],
      // The StopBackend to the frozen agent stays in flight until the coordinator dies.
      config: { stop: { timeout: "60s", rpcTimeout: "60s" } },
    });
    const b = await c.addAgent("b");
    const inc = (await c.admin.loadModel({ model: "m" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    expect(inc).not.toBe("");
    b.pause();
    const unload = c.admin.unloadModel({ model: "m" }, { timeoutMs: 120_000 }).catch((e: unknown) => e);
    await c.coord.waitForEvent("eviction.started", (e) => e.incarnation === inc, 60_000);
    await c.restartCoordinator();
    expect(await unload).toBeInstanceOf(Error);

    const watch = watchAccounting(() => c.admin, c.tag, "b");
    const rows = (await c.admin.listModels({})).instances.map((i) => [i.model, i.incarnation, i.state]);
    expect(rows).toEqual([["m", inc, InstanceState.LEFTOVER]]);
    expect(accountingProblems(await observe(c.admin, c.tag))).toEqual([]);
    // Never routable again: every row of it, until it is gone, is a leftover.
    const states = new Set<InstanceState>();
    const poll = setInterval(() => {
      void c.admin.listModels({}).then(
        (r) => {
          for (const i of r.instances) if (i.incarnation === inc) states.add(i.state);
        },
        () => undefined,
      );
    }, 50);

    b.resume();
    await c.coord.waitForEvent("leftover.reaped", (e) => e.incarnation === inc, 90_000);
    await until("b's backend gone", async () => (await b.liveBackends()).length === 0, 60_000);
    clearInterval(poll);
    expect([...states]).toEqual([InstanceState.LEFTOVER]);
    const end = await untilConverged(c.admin, c.tag, ["b"]);
    expect(end.rows).toEqual([]);
    const sampled = await watch.stop();
    expect(sampled.problems).toEqual([]);
    expect(sampled.samples).toBeGreaterThan(0);
    const audit = await untilAuditComplete(c.nats.url, () => c.logged());
    expect(typesOf(audit.events, inc).filter((t) => t !== "eviction.retried")).toEqual(["backend.loaded", "eviction.started", "recovered", "eviction.failed", "instance.adopted", "leftover.reaped"]);
  });
});
