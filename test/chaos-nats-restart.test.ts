/**
 * Chaos, real processes (faults F9/F10): nats-server is
 * killed (SIGKILL) in the middle of a burst of group evictions (driven by
 * inference calls alone, several at once per model), evictions go
 * on while it is down, and it is started again on the same port and the same
 * JetStream store dir. Evictions never wait for the audit: the burst
 * completes, and once the server is back the outbox drains so that every
 * event any coordinator logged is on the stream exactly once after
 * de-duplication by id (Nats-Msg-Id), each eviction started → stopped in
 * per-instance order, and the cluster converges.
 */
import { describe, expect, it } from "vitest";
import { InstanceState } from "@warden/proto";
import { typesOf, untilAuditComplete, untilConverged, watchAccounting } from "./support/chaos-checks.js";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import { simModel, until } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

const models = 6;

describe("chaos: nats-server restarted during a burst of evictions", { timeout: 240_000 }, () => {
  it("the burst completes while NATS is down; after the restart (same port, same store) nothing is lost, nothing is duplicated after de-dup by id, every eviction is started → stopped in order; converged", async () => {
    const c = await chaos.start({
      name: "chaos-nats",
      models: Array.from({ length: models }, (_, i) => simModel(`g${String(i)}`, { groups: ["g"], memoryEstimate: "1GiB" })),
    });
    await c.addAgent("a");
    // Everything that runs stays accounted at every observation, through the faults.
    const watch = watchAccounting(() => c.admin, c.tag);
    const stopped = (): number => c.logged().filter((e) => e.type === "eviction.stopped").length;

    // The burst: three calls per model, each model evicting the one before it (group g).
    let burstOver = false;
    const burst = (async () => {
      for (let i = 0; i < models; i++) {
        const model = `g${String(i)}`;
        const replies = await Promise.all([0, 1, 2].map(async () => c.inference.predict({ model, options: { Prompt: "x" } }, { timeoutMs: 60_000 })));
        expect(replies.map((r) => r.nodeId)).toEqual(["a", "a", "a"]);
      }
    })().finally(() => {
      burstOver = true;
    });
    await until("two evictions done with NATS up", () => stopped() >= 2 || burstOver, 120_000);
    expect(burstOver).toBe(false);
    await c.nats.kill();
    const atKill = stopped();
    // Evictions go on with the server down (and are written to the outbox, not lost).
    await until("two more evictions while NATS is down", () => stopped() >= atKill + 2, 120_000);
    expect(c.nats.running()).toBe(false);
    await c.nats.start();
    await burst;
    // The last load's backend.loaded is journaled after its reply, so it can be logged after the
    // last eviction.stopped: wait for both.
    const loadedLogged = (): boolean => Array.from({ length: models }, (_, i) => `g${String(i)}`).every((m) => c.logged().some((e) => e.type === "backend.loaded" && e.model === m));
    await until("the last eviction and every load logged", () => stopped() === models - 1 && loadedLogged());

    const incarnations = Array.from({ length: models }, (_, i) => c.logged().find((e) => e.type === "backend.loaded" && e.model === `g${String(i)}`)?.incarnation ?? "");
    expect(new Set(incarnations).size).toBe(models);
    const end = await untilConverged(c.admin, c.tag, ["a"]);
    const sampled = await watch.stop();
    expect(sampled.problems).toEqual([]);
    expect(sampled.samples).toBeGreaterThan(0);
    expect(end.rows.map((r) => [r.model, r.incarnation, r.state])).toEqual([[`g${String(models - 1)}`, incarnations[models - 1], InstanceState.READY]]);
    const audit = await untilAuditComplete(c.nats.url, () => c.logged());
    // Within the duplicate window the server itself refuses a re-published id (its de-dup state survives the restart).
    expect(audit.duplicates).toBe(0);
    for (const inc of incarnations.slice(0, -1)) expect(typesOf(audit.events, inc)).toEqual(["backend.loaded", "eviction.started", "eviction.stopped"]);
    expect(typesOf(audit.events, incarnations[models - 1] ?? "")).toEqual(["backend.loaded"]);
  });
});
