import { ManualClock } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createWatchdogCore, type WatchdogCore } from "./watchdog-core.js";

// The tick's work is a count (addresses judged), not a time: it must follow
// what is due and what changed, not how many instances there are.

function fleet(count: number, clock: ManualClock): WatchdogCore {
  const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true }, policy: { idleCheck: true, idleTimeoutMs: 60_000, busyCheck: true, busyTimeoutMs: 30_000 } });
  for (let i = 0; i < count; i++) core.registerReady({ nodeId: `n${String(i % 1000)}`, model: `m${String(i)}`, incarnation: `i${String(i)}`, address: `10.0.${String(i % 1000)}.1:${String(5000 + Math.floor(i / 1000))}` });
  return core;
}

describe("tick work", () => {
  it("judges no address when none of 10 000 instances is due", () => {
    const clock = new ManualClock(0);
    const core = fleet(10_000, clock);
    clock.advance(500);
    expect(core.tick().stops).toEqual([]);
    // The first tick times every new address once; judging is for due ones only.
    expect(core.lastTickWork()).toEqual({ retimed: 10_000, visited: 0, scheduled: 10_000 });
    clock.advance(500);
    expect(core.tick().stops).toEqual([]);
    expect(core.lastTickWork()).toEqual({ retimed: 0, visited: 0, scheduled: 10_000 });
    // The reference tick judges them all: the count above is the one that matters.
    clock.advance(500);
    core.tickFullScan();
    expect(core.lastTickWork().visited).toBe(10_000);
  });

  it("judges only the due addresses and re-times only the changed ones", () => {
    const clock = new ManualClock(0);
    const core = fleet(10_000, clock);
    core.tick();
    // Five addresses get a call (begin and end): their idle timers restart.
    for (let i = 0; i < 5; i++) core.trackRequest(`10.0.${String(i)}.1:5000`)();
    // Three get a call that never ends: busy for good.
    for (let i = 5; i < 8; i++) core.trackRequest(`10.0.${String(i)}.1:5000`);
    clock.advance(500);
    core.tick();
    expect(core.lastTickWork()).toMatchObject({ retimed: 8, visited: 0 });
    // Past the busy timeout: the three stuck ones are due, nothing else.
    clock.advance(30_000);
    const d = core.tick();
    expect(d.stops.map((s) => `${s.reason} ${s.incarnation}`)).toEqual(["busy i5", "busy i6", "busy i7"]);
    expect(core.lastTickWork()).toMatchObject({ retimed: 0, visited: 3 });
  });

  it("an idle eviction held back by the replica floor goes once the model gains a ready instance", () => {
    const clock = new ManualClock(0);
    const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true }, policy: { idleCheck: true, idleTimeoutMs: 100 } });
    core.setModelRules(new Map([["a", { minReplicas: 1, idleTimeoutMs: undefined }]]));
    core.registerReady({ nodeId: "n1", model: "a", incarnation: "a1", address: "x1" });
    core.registerReady({ nodeId: "n1", model: "a", incarnation: "a2", address: "x2" });
    clock.advance(200);
    expect(core.tick().stops.map((s) => s.incarnation)).toEqual(["a1"]);
    core.settle("a1", { t: "stopped" });
    // a2 is the floor now: kept, and not judged again on every tick.
    clock.advance(500);
    expect(core.tick().stops).toEqual([]);
    clock.advance(500);
    expect(core.tick().stops).toEqual([]);
    expect(core.lastTickWork().visited).toBe(0);
    // A third replica comes up: a2 is above the floor again and long idle.
    core.registerReady({ nodeId: "n1", model: "a", incarnation: "a3", address: "x3" });
    expect(core.tick().stops.map((s) => s.incarnation)).toEqual(["a2"]);
  });

  it("an instance held back by its pin is judged again when the pin goes", () => {
    const clock = new ManualClock(0);
    const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true }, policy: { idleCheck: true, idleTimeoutMs: 100, pinnedModels: ["a"] } });
    core.registerReady({ nodeId: "n1", model: "a", incarnation: "a1", address: "x1" });
    clock.advance(200);
    expect(core.tick().stops).toEqual([]);
    core.updatePolicy({ pinnedModels: [] });
    expect(core.tick().stops.map((s) => s.incarnation)).toEqual(["a1"]);
  });
});
