import { Code } from "@warden/common";
import { describe, expect, it } from "vitest";
import type { StopAnswer } from "./ports.js";
import { createHarness, deferred, rpcError } from "./test-fakes.js";

// Settle row 1: a later incarnation registered on the stopped instance's
// address meanwhile. The watchdog touches nothing of the address; the loader
// must still end the eviction (one terminal event) and must not keep holding
// an incarnation the watchdog no longer has.
describe("settle row 1 (replaced) in the loader", () => {
  it("a failed stop of a held instance whose port serves another incarnation: dropped, gone, eviction.stopped(alreadyGone)", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const address = m1.address ?? "";
    const answer = deferred<StopAnswer>();
    h.n1.stopScript = () => answer.promise;
    const stop = h.track(h.loader.unload("m1", { force: true }));
    await h.until(() => h.n1.stopsOf(m1.incarnation).length === 1);
    // m1's process exits before the stop reaches it; the exit notification is lost and
    // the agent gives the port to m2. Then the stop's answer is lost too, and so is isRunning.
    h.n1.running.delete(m1.incarnation);
    h.n1.recycledAddress = address;
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(m2.address).toBe(address);
    h.n1.isRunningAnswer = () => {
      throw rpcError(Code.Unavailable, "agent unreachable");
    };
    answer.reject(rpcError(Code.Unavailable, "connection reset"));
    await h.until(() => stop.done());
    expect(stop.value()).toEqual({ t: "stopped", incarnation: m1.incarnation });
    // No phantom: the loader no longer holds what the watchdog forgot.
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.loader.hasModelAtAddress("m1", address, m1.incarnation)).toBe(false);
    expect(h.loader.isGone(m1.incarnation)).toBe(true);
    expect(h.journal.open.has(m1.incarnation)).toBe(false);
    expect(h.loader.leftoverList()).toHaveLength(0);
    // Exactly one terminal event, after eviction.started.
    const mine = h.events.list.filter((e) => e.incarnation === m1.incarnation && e.type.startsWith("eviction."));
    expect(mine.map((e) => e.type)).toEqual(["eviction.started", "eviction.stopped"]);
    expect(mine[1]).toMatchObject({ alreadyGone: true, address });
    // The replacement is untouched.
    expect(h.loader.core.instanceAt(address)?.incarnation).toBe(m2.incarnation);
    expect(h.loader.hasModelAtAddress("m2", address, m2.incarnation)).toBe(true);
  });

  it("a failed stop replaced by an incarnation of another node is no evidence: a leftover, intent kept, stop retried", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const address = m1.address ?? "";
    const answer = deferred<StopAnswer>();
    h.n2.stopScript = () => answer.promise;
    const stop = h.track(h.loader.unload("m1", { force: true }));
    await h.until(() => h.n2.stopsOf(m1.incarnation).length === 1);
    h.n1.recycledAddress = address; // n1's agent reports the same address: nothing about n2's process
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(m2.address).toBe(address);
    answer.reject(rpcError(Code.Unavailable, "connection reset"));
    await h.until(() => stop.done());
    expect(stop.value()).toMatchObject({ t: "leftover", incarnation: m1.incarnation });
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.loader.isGone(m1.incarnation)).toBe(false);
    expect(h.loader.leftoverList()).toMatchObject([{ incarnation: m1.incarnation, nodeId: "n2" }]);
    expect(h.journal.open.has(m1.incarnation)).toBe(true);
    const mine = h.events.list.filter((e) => e.incarnation === m1.incarnation && e.type.startsWith("eviction."));
    expect(mine.map((e) => e.type)).toEqual(["eviction.started", "eviction.failed"]);
    expect(mine[1]).toMatchObject({ outcome: "leftover" });
    h.n2.stopScript = () => ({ t: "stopped" });
    await h.until(() => h.loader.leftoverList().length === 0);
    expect(h.journal.open.has(m1.incarnation)).toBe(false);
    expect(h.loader.core.instanceAt(address)?.incarnation).toBe(m2.incarnation);
  });

  it("a confirmed stop settled as replaced still writes its eviction.stopped", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const stop = h.track(h.loader.unload("m1", { force: false }));
    await h.run(1_000);
    expect(stop.done()).toBe(false); // the busy wait
    h.n1.recycledAddress = lease.address;
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(m2.address).toBe(lease.address);
    await h.until(() => stop.done());
    const mine = h.events.list.filter((e) => e.incarnation === lease.incarnation && e.type.startsWith("eviction."));
    expect(mine.map((e) => e.type)).toEqual(["eviction.started", "eviction.stopped"]);
    expect(mine[1]).toMatchObject({ alreadyGone: false });
    expect(h.loader.heldInstance(lease.incarnation)).toBeUndefined();
    expect(h.loader.isGone(lease.incarnation)).toBe(true);
    lease.complete();
  });
});
