import { Code } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createHarness, rejection } from "./test-fakes.js";

// A spawn on an address the watchdog still registers to an older incarnation
// (seed 14857's setting: that process died unnoticed and the agent recycled
// its port). The spawned process is Warden's: it must end registered, or
// stopped, or tracked as a leftover until it is — never unaccounted.
describe("a load whose spawn reuses a registered address", () => {
  it("removes the stale incarnation first when its own node recycled the port, and registers the new one", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const address = m1.address ?? "";
    // m1's process exits; the exit notification is lost; the agent gives its port to the next start.
    h.n1.running.delete(m1.incarnation);
    h.n1.recycledAddress = address;
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(m2.address).toBe(address);
    expect(h.loader.core.instanceAt(address)?.incarnation).toBe(m2.incarnation);
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.hasModelAtAddress("m1", address, m1.incarnation)).toBe(false);
    expect(h.loader.isGone(m1.incarnation)).toBe(true);
    expect(h.events.ofType("backend.exited").map((e) => e.incarnation)).toEqual([m1.incarnation]);
    expect(h.loader.core.occupancy("n1")).toMatchObject({ ready: 1, total: 1 });
    expect(h.loader.leftoverList()).toHaveLength(0);
  });

  it("a refused registration (no proof the holder is gone) stops the spawned process through a leftover", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const address = m1.address ?? "";
    // Another node's agent reports the same address: that is no evidence about n1's m1.
    h.placement.route.set("m2", "n2");
    h.n2.recycledAddress = address;
    const e = await rejection(h.loader.ensureLoaded("m2", h.never));
    expect(e.code).toBe(Code.FailedPrecondition);
    const m2 = h.n2.startOf("m2").incarnation;
    expect(h.n2.running.has(m2)).toBe(true);
    // Accounted at once, with a stop intent, and the holder untouched.
    expect(h.loader.leftoverList()).toMatchObject([{ incarnation: m2, nodeId: "n2", address }]);
    expect(h.journal.open.has(m2)).toBe(true);
    expect(h.loader.core.instanceAt(address)?.incarnation).toBe(m1.incarnation);
    // The leftover's retry stops it by (address, incarnation) and reaps it.
    await h.until(() => h.loader.leftoverList().length === 0);
    expect(h.n2.stopsOf(m2)).toMatchObject([{ address, incarnation: m2, force: true }]);
    expect(h.n2.running.has(m2)).toBe(false);
    expect(h.journal.open.has(m2)).toBe(false);
    expect(h.events.ofType("leftover.reaped").map((x) => x.incarnation)).toEqual([m2]);
    expect(h.n1.stopsOf(m1.incarnation)).toHaveLength(0);
  });
});
