import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createHarness } from "./test-fakes.js";

describe("the stop sequence (DESIGN §3.3)", () => {
  it("a graceful unload calls Free exactly once, through the node's agent, then StopBackend (not forced)", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const backend = m1.backend!;
    expect(await h.loader.unload("m1", { force: false })).toEqual({ t: "stopped", incarnation: m1.incarnation });
    // Through the node's agent (its leader-epoch fence), naming the incarnation.
    expect(h.n1.freeRequests).toEqual([{ address: m1.address, incarnation: m1.incarnation }]);
    expect(h.frees.callsAt(m1.address!)).toBe(1);
    expect(h.n1.stopsOf(m1.incarnation)).toMatchObject([{ address: m1.address, force: false, reason: "admin" }]);
    expect(h.log.indexOf(`free ${m1.address!}`)).toBeLessThan(h.log.indexOf(`stop ${m1.incarnation}`));
    expect(backend.closed).toBe(true);
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.heldInstance(m1.incarnation)).toBeUndefined();
    expect(h.events.ofType("eviction.started")).toMatchObject([{ incarnation: m1.incarnation, reason: "admin", force: false, wasBusy: false }]);
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: m1.incarnation, reason: "admin", alreadyGone: false }]);
  });

  it("a force unload never calls Free", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    expect(await h.loader.unload("m1", { force: true })).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(h.frees.callsAt(m1.address!)).toBe(0);
    expect(h.n1.stopsOf(m1.incarnation)).toMatchObject([{ force: true }]);
  });

  it("a Free answering UNIMPLEMENTED does not stop the stop", async () => {
    const h = createHarness();
    h.frees.script = async () => {
      throw new WardenError(Code.Unimplemented, "Free not implemented");
    };
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    expect(await h.loader.unload("m1", { force: false })).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(h.warnings).toEqual([]);
  });

  it("records the stop intent before StopBackend and clears it after a successful stop", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    let openDuringStop = false;
    h.n1.duringStop = (r) => {
      openDuringStop = h.journal.open.has(r.incarnation);
    };
    await h.loader.unload("m1", { force: false });
    expect(openDuringStop).toBe(true);
    const relevant = h.log.filter((l) => l.includes(m1.incarnation) && /^(intent|stop)/.test(l));
    expect(relevant).toEqual([`intent.record ${m1.incarnation}`, `stop ${m1.incarnation}`, `intent.clear ${m1.incarnation}`]);
    expect(h.journal.records).toMatchObject([{ incarnation: m1.incarnation, nodeId: "n1", model: "m1", address: m1.address, reason: "admin" }]);
    expect(h.journal.open.size).toBe(0);
  });

  it("local: the loader still holds the instance while StopBackend runs, and drops it once it succeeded", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    let heldDuringStop: boolean | undefined;
    h.n1.duringStop = () => {
      heldDuringStop = h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation);
    };
    await h.loader.unload("m1", { force: true });
    expect(heldDuringStop).toBe(true);
    expect(h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation)).toBe(false);
  });

  it("local+remote: drops the local half before StopBackend is sent", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    expect(m1.placement).toBe("local-remote");
    const backend = m1.backend!;
    let heldDuringStop: boolean | undefined;
    let closedDuringStop: boolean | undefined;
    let intentDuringStop: boolean | undefined;
    h.n2.duringStop = (r) => {
      heldDuringStop = h.loader.hasModelAtAddress("m1", m1.address!, m1.incarnation);
      closedDuringStop = backend.closed;
      intentDuringStop = h.journal.open.has(r.incarnation);
    };
    expect(await h.loader.unload("m1", { force: false })).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(heldDuringStop).toBe(false);
    expect(closedDuringStop).toBe(true);
    expect(intentDuringStop).toBe(true);
    expect(h.n2.freeRequests.map((r) => r.incarnation)).toEqual([m1.incarnation]);
    expect(h.n2.stopsOf(m1.incarnation)).toHaveLength(1);
    expect(h.journal.open.size).toBe(0);
  });

  it("StopBackend NOT_FOUND counts as already gone (row 2) and clears the intent", async () => {
    const h = createHarness();
    h.placement.route.set("m1", "n2");
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    h.n2.stopScript = () => new WardenError(Code.NotFound, "no such incarnation");
    expect(await h.loader.unload("m1", { force: true })).toEqual({ t: "stopped", incarnation: m1.incarnation });
    expect(h.loader.core.instance(m1.incarnation)).toBeUndefined();
    expect(h.loader.leftoverList()).toHaveLength(0);
    expect(h.journal.open.size).toBe(0);
    expect(h.events.ofType("eviction.stopped")).toMatchObject([{ incarnation: m1.incarnation, alreadyGone: true }]);
  });
});
