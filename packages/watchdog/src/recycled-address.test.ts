import { describe, expect, it } from "vitest";
import { createFixture, type Fixture } from "./watchdog-fixture.js";

// The agent recycles a port only once its process exited; request state is
// keyed by address, so a predecessor still pending its stop there leaves its
// calls behind when the replacement registers (seed 18428).

/** m2 ready at a1 with one call its process never answered, stopped (held), then exited; returns the stop. */
function predecessorWithDeadCall(f: Fixture): { readonly old: string; readonly oldCall: () => void; readonly stop: Promise<unknown> } {
  const old = f.reg("a1", "m2");
  const oldCall = f.core.trackRequest("a1");
  f.port.manual = true;
  const stop = f.svc.stop(old, { reason: "admin" });
  expect(f.core.remove(old)).toMatchObject({ t: "pending" });
  return { old, oldCall, stop };
}

describe("a replacement registered on a recycled address", () => {
  it("starts with fresh request state: the predecessor's open calls neither make it busy nor keep its idle state unseeded", async () => {
    const f = createFixture({ busyCheck: true, busyTimeoutMs: 48_000 });
    const { old, oldCall, stop } = predecessorWithDeadCall(f);
    f.clock.advance(30_000);

    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "new", address: "a1" });
    expect(f.core.requestState("a1")).toBeUndefined();
    f.core.markReady("new");
    expect(f.core.requestState("a1")).toMatchObject({ inFlight: 0, busySinceMs: undefined, idleSinceMs: f.clock.now() });

    f.port.release(old, { t: "alreadyGone" });
    expect(await stop).toMatchObject({ report: { result: { row: 1, replacedBy: "new" } } });
    f.clock.advance(20_000); // the predecessor's call is now 50 s old, past T_busy
    const newCall = f.core.trackRequest("a1");
    f.clock.advance(300);
    expect(f.core.tick().stops).toEqual([]);
    expect(f.core.instance("new")).toMatchObject({ state: "ready", pendingEviction: undefined, inFlight: 1, busySinceMs: f.clock.now() - 300 });

    oldCall(); // a no-op: it belonged to the cleared state
    expect(f.core.inFlight("a1")).toBe(1);
    newCall();
    expect(f.core.requestState("a1")).toMatchObject({ inFlight: 0, busySinceMs: undefined });
  });

  it("still evicts the replacement once its own oldest call is older than T_busy", async () => {
    const f = createFixture({ busyCheck: true, busyTimeoutMs: 48_000 });
    const { old, stop } = predecessorWithDeadCall(f);
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "new", address: "a1" });
    f.core.markReady("new");
    f.port.release(old, { t: "alreadyGone" });
    await stop;
    f.core.trackRequest("a1");
    f.clock.advance(48_000);
    expect(f.core.tick().stops).toEqual([]);
    f.clock.advance(1);
    expect(f.core.tick().stops).toMatchObject([{ incarnation: "new", reason: "busy" }]);
  });

  it("keeps calls tracked on an address nothing was registered at: only a predecessor's record makes them stale", () => {
    const f = createFixture({});
    f.core.trackRequest("a1");
    f.core.registerLoading({ nodeId: "n1", model: "m1", incarnation: "new", address: "a1" });
    expect(f.core.inFlight("a1")).toBe(1);
  });
});
