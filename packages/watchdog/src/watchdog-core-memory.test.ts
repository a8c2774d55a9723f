import { describe, expect, it } from "vitest";
import { createFixture, flush, type Fixture } from "./watchdog-fixture.js";
import { expectInvalid } from "./expect-invalid.js";

describe("memory reclaimer per node and per GPU", () => {
  function setup(): Fixture {
    const f = createFixture({ memoryReclaimer: true, memoryReleaseWaitMs: 10_000, memoryReleaseHoldMs: 30_000 });
    f.reg("g0", "m-gpu0", { gpu: 0 });
    f.reg("g1", "m-gpu1", { gpu: 1 });
    f.reg("g1b", "m-gpu1-b", { gpu: 1 });
    return f;
  }
  const reading = (gpu0: number, gpu1: number) => ({
    gpus: [
      { index: 0, totalBytes: 100, usedBytes: gpu0 },
      { index: 1, totalBytes: 100, usedBytes: gpu1 },
    ],
  });

  it("pressure on one GPU evicts from that GPU only, even when the node average is low", async () => {
    const f = setup();
    const changes = f.core.reportMemory("n1", reading(10, 97));
    expect(changes).toMatchObject([{ device: 1, on: true }]);
    const { decision } = f.svc.tick();
    expect(decision.stops.map((s) => s.model)).toEqual(["m-gpu1"]);
    await flush();
  });

  it("waits for a newer reading or the release wait after a settle; one eviction at a time", async () => {
    const f = setup();
    f.port.manual = true;
    f.core.reportMemory("n1", reading(10, 99));
    expect(f.svc.tick().decision.stops).toHaveLength(1);
    f.clock.advance(500);
    expect(f.svc.tick().decision.stops).toHaveLength(0); // still in flight
    f.port.release(f.port.heldIncarnations()[0] ?? "");
    await flush();
    f.clock.advance(500);
    expect(f.svc.tick().decision.stops).toHaveLength(0); // release wait: no newer reading yet
    f.clock.advance(100);
    f.core.reportMemory("n1", reading(10, 98)); // newer reading still shows pressure
    expect(f.svc.tick().decision.stops.map((s) => s.model)).toEqual(["m-gpu1-b"]);
    f.port.release(f.port.heldIncarnations()[0] ?? "");
    await flush();
  });

  it("the release wait also ends after 10 s without a reading", async () => {
    const f = setup();
    f.core.reportMemory("n1", reading(10, 99));
    f.svc.tick();
    await flush();
    f.clock.advance(9_000);
    expect(f.svc.tick().decision.stops).toHaveLength(0);
    f.clock.advance(1_000);
    expect(f.svc.tick().decision.stops).toHaveLength(1);
    await flush();
  });

  it("hysteresis: below the release threshold nothing more is evicted; pressure turns off only after 30 s below", () => {
    const f = setup();
    f.core.reportMemory("n1", reading(10, 96));
    f.core.reportMemory("n1", reading(10, 92)); // between off and on: still on, still relieving
    expect(f.core.snapshot().nodes[0]?.memory.find((d) => d.device === 1)?.pressure).toBe(true);
    f.core.reportMemory("n1", reading(10, 85));
    f.clock.advance(20_000);
    expect(f.core.tick()).toMatchObject({ stops: [], pressureChanges: [] });
    f.clock.advance(10_000);
    expect(f.core.tick().pressureChanges).toMatchObject([{ device: 1, on: false }]);
  });

  it("flapping around the threshold does not cause an eviction storm", async () => {
    const f = setup();
    for (let i = 0; i < 20; i++) {
      f.core.reportMemory("n1", reading(10, i % 2 === 0 ? 96 : 94));
      f.svc.tick();
      await flush();
      f.clock.advance(500);
    }
    // 10 s of flapping: the first eviction, then the release waits spaced by newer readings that still show pressure.
    expect(f.port.calls.length).toBeLessThanOrEqual(3);
  });

  it("a node without GPUs uses system memory; pinned instances are never reclaimed", async () => {
    const f = createFixture({ memoryReclaimer: true, pinnedModels: ["p"] });
    f.reg("a1", "p");
    f.reg("a2", "q");
    f.core.reportMemory("n1", { gpus: [], ram: { totalBytes: 100, usedBytes: 99 } });
    expect(f.svc.tick().decision.stops.map((s) => s.model)).toEqual(["q"]);
    await flush();
  });

  it("rejects bad readings naming the field", () => {
    const f = setup();
    expectInvalid(() => f.core.reportMemory("n1", { gpus: [{ index: 0, totalBytes: Number.NaN, usedBytes: 1 }] }), "gpus[0].totalBytes");
    expectInvalid(() => f.core.reportMemory("n1", { gpus: [{ index: -1, totalBytes: 1, usedBytes: 1 }] }), "gpus[0].index");
  });
});
