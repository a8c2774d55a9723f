import { StaleLeaderEpochError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createHarness } from "./test-fakes.js";

// HA fencing: an agent that has seen a newer leader epoch refuses this
// coordinator's StopBackend whole (FAILED_PRECONDITION, nothing changed). The
// process runs exactly as before, so per the central rule it was not stopped
// by us: the instance stays registered (row 3) on every placement, no intent
// is kept and no leftover is made to retry a refusal a retry cannot change.
const stale = () => new StaleLeaderEpochError(3n, 4n);

describe("a StopBackend refused for a stale leader epoch", () => {
  it("remote: registered again and routable (not a leftover), intent cleared, never retried", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = stale;
    const out = await h.loader.unload("m1", { force: true });
    expect(out).toMatchObject({ t: "registered-again", incarnation: m1.incarnation });
    expect(h.loader.core.instance(m1.incarnation)).toMatchObject({ state: "ready", pendingEviction: undefined });
    expect(h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation)).toBe(true);
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.journal.open.size).toBe(0);
    expect(h.events.ofType("eviction.failed")).toMatchObject([{ incarnation: m1.incarnation, outcome: "registered-again" }]);
    expect(h.n2.stops).toHaveLength(1);
    // Still served by the same process: a call routes to it, no new start.
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.incarnation).toBe(m1.incarnation);
    expect(h.n2.starts).toHaveLength(1);
    lease.complete();
  });

  it("local: registered again without asking the agent whether it still runs", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n1.stopScript = stale;
    const out = await h.loader.unload("m1", { force: true });
    expect(out).toMatchObject({ t: "registered-again", incarnation: m1.incarnation });
    expect(h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation)).toBe(true);
    expect(h.journal.open.size).toBe(0);
    expect(h.n1.isRunningCalls).toEqual([]);
  });
});

describe("a Free refused for a stale leader epoch (the agent's fence judges the stop sequence's Free)", () => {
  it("remote: nothing dropped, journaled or sent after it; registered again (row 3), freed = false, routable", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.frees.script = () => Promise.reject(stale());
    const out = await h.loader.unload("m1", { force: false });
    expect(out).toMatchObject({ t: "registered-again", incarnation: m1.incarnation });
    expect(h.n2.freeRequests.map((r) => r.incarnation)).toEqual([m1.incarnation]);
    // The agent would refuse the StopBackend too: none is sent, no intent written, the local half kept.
    expect(h.n2.stops).toHaveLength(0);
    expect(h.journal.records).toHaveLength(0);
    expect(h.loader.core.instance(m1.incarnation)).toMatchObject({ state: "ready", pendingEviction: undefined });
    expect(h.loader.heldInstance(m1.incarnation)).toBeDefined();
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.warnings).toEqual([]);
    const lease = await h.loader.acquire("m1", h.never);
    expect(lease.incarnation).toBe(m1.incarnation);
    lease.complete();
  });
});
