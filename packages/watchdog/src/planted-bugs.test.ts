import { Code } from "@warden/common";
import { plantBugs, type PlantedBug } from "@warden/common/testing/planted-bugs";
import { afterEach, describe, expect, it } from "vitest";
import { createFixture, flush, type Fixture } from "./watchdog-fixture.js";

// Each planted bug (packages/common/src/planted-bugs.ts) changes the
// watchdog's behaviour at its one branch, and only when planted: the same
// scenario runs with the switch off (the correct answer) and on (the bug).

let undo: (() => void) | undefined;
afterEach(() => {
  undo?.();
  undo = undefined;
});

function withBug<T>(bug: PlantedBug | undefined, run: () => T): T {
  undo?.();
  undo = bug === undefined ? undefined : plantBugs([bug]);
  return run();
}

function failing(f: Fixture): void {
  f.port.outcome = () => ({ t: "failed", message: "deadline exceeded", code: Code.DeadlineExceeded, freed: false });
}

async function failedStopOf(bug: PlantedBug | undefined, holds: boolean): Promise<{ f: Fixture; inc: string; row: number }> {
  return withBug(bug, async () => {
    const f = createFixture();
    const inc = f.reg("a1", "m1");
    f.loader.holdsByDefault = holds;
    failing(f);
    const r = await f.svc.stop(inc, { reason: "admin", force: true });
    if (r.t !== "settled") throw new Error(r.t);
    return { f, inc, row: r.report.result.row };
  });
}

describe("planted bugs in the watchdog", () => {
  it("forget-on-failed-stop: a failed stop of an instance the loader holds forgets it instead of registering it again", async () => {
    const off = await failedStopOf(undefined, true);
    expect(off.row).toBe(3);
    expect(off.f.core.instance(off.inc)?.state).toBe("ready");
    const on = await failedStopOf("forget-on-failed-stop", true);
    expect(on.row).toBe(2);
    expect(on.f.core.instance(on.inc)).toBeUndefined();
  });

  it("register-again-without-asking-loader: a failed stop the loader dropped is registered again (a phantom)", async () => {
    const off = await failedStopOf(undefined, false);
    expect(off.row).toBe(4);
    expect(off.f.loader.asked).toEqual([off.inc]);
    const on = await failedStopOf("register-again-without-asking-loader", false);
    expect(on.row).toBe(3);
    expect(on.f.loader.asked).toEqual([]);
    expect(on.f.core.instance(on.inc)?.state).toBe("ready");
  });

  it("restore-request-snapshot: a request that completed during a failed stop comes back in flight", async () => {
    const run = (bug: PlantedBug | undefined): Promise<number> =>
      withBug(bug, async () => {
        const f = createFixture();
        const inc = f.reg("a1", "m1");
        const done = f.core.trackRequest("a1");
        failing(f);
        f.port.hook = () => {
          done();
        };
        await f.svc.stop(inc, { reason: "admin", force: true });
        return f.core.inFlight("a1");
      });
    expect(await run(undefined)).toBe(0);
    expect(await run("restore-request-snapshot")).toBe(1);
  });

  it("stop-without-incarnation-check: the settle of an old incarnation clears the request state of its replacement", async () => {
    const run = (bug: PlantedBug | undefined): Promise<{ inFlight: number; row: number }> =>
      withBug(bug, async () => {
        const f = createFixture();
        const old = f.reg("a1", "m1");
        f.port.manual = true;
        const stopping = f.svc.stop(old, { reason: "admin", force: true });
        await flush();
        // The old process died and a new incarnation took its port meanwhile.
        f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "new", address: "a1" });
        f.core.markReady("new");
        f.core.trackRequest("a1");
        f.port.release(old, { t: "stopped" });
        const r = await stopping;
        if (r.t !== "settled") throw new Error(r.t);
        return { inFlight: f.core.inFlight("a1"), row: r.report.result.row };
      });
    expect(await run(undefined)).toEqual({ inFlight: 1, row: 1 });
    expect(await run("stop-without-incarnation-check")).toEqual({ inFlight: 0, row: 2 });
  });

  it("count-failed-stops-as-evicted: a failed LRU stop counts as evicted and the load is admitted over the limit", async () => {
    const run = (bug: PlantedBug | undefined): Promise<{ t: string; ready: number }> =>
      withBug(bug, async () => {
        const f = createFixture({ limitPerNode: 1 });
        f.reg("a1", "m1");
        failing(f);
        const r = await f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
        return { t: r.t, ready: f.core.occupancy("n1").ready };
      });
    expect(await run(undefined)).toEqual({ t: "waited", ready: 1 });
    expect(await run("count-failed-stops-as-evicted")).toEqual({ t: "admitted", ready: 1 });
  });

  it("idle-busy-see-pending: the busy check clears the request state of an address whose stop is in flight", async () => {
    const run = (bug: PlantedBug | undefined): Promise<number> =>
      withBug(bug, async () => {
        const f = createFixture({ busyCheck: true, busyTimeoutMs: 1_000 });
        const inc = f.reg("a1", "m1");
        f.core.trackRequest("a1");
        f.port.manual = true;
        void f.svc.stop(inc, { reason: "admin", force: false });
        await flush();
        f.clock.advance(5_000);
        f.core.tick();
        return f.core.inFlight("a1");
      });
    expect(await run(undefined)).toBe(1);
    expect(await run("idle-busy-see-pending")).toBe(0);
  });

  it("admission-ignores-pending: a second load is admitted into the slot of an eviction still in flight", async () => {
    const run = (bug: PlantedBug | undefined): Promise<string> =>
      withBug(bug, async () => {
        const f = createFixture({ limitPerNode: 1 });
        f.reg("a1", "m1");
        f.port.manual = true;
        void f.svc.admit({ nodeId: "n1", model: "m2", incarnation: "m2-1" });
        await flush();
        return f.core.admit({ nodeId: "n1", model: "m3", incarnation: "m3-1" }).t;
      });
    expect(await run(undefined)).toBe("wait");
    expect(await run("admission-ignores-pending")).toBe("admitted");
  });

  it("inflight-below-zero: a completion called twice decrements again", () => {
    const run = (bug: PlantedBug | undefined): number =>
      withBug(bug, () => {
        const f = createFixture();
        f.reg("a1", "m1");
        const a = f.core.trackRequest("a1");
        f.core.trackRequest("a1");
        a();
        a();
        return f.core.inFlight("a1");
      });
    expect(run(undefined)).toBe(1);
    expect(run("inflight-below-zero")).toBe(0);
  });
});
