import { describe, expect, it } from "vitest";
import { createFixture } from "./watchdog-fixture.js";

describe("evictions held on a node whose agent is unreachable", () => {
  it("idle, busy and memory evictions skip the held node; the others go on; released, they resume", () => {
    const f = createFixture({ busyCheck: true, busyTimeoutMs: 10, idleCheck: true, idleTimeoutMs: 10, memoryReclaimer: true });
    f.reg("a1", "idle-held", { nodeId: "n1" });
    f.reg("a2", "busy-held", { nodeId: "n1", gpu: 0 });
    f.core.trackRequest("a2");
    f.reg("b1", "idle-free", { nodeId: "n2" });
    f.core.holdEvictions("n1", true);
    f.core.reportMemory("n1", { gpus: [{ index: 0, totalBytes: 10, usedBytes: 10 }] });
    f.clock.advance(50);
    // A stop there would need the unreachable agent: only n2's idle instance goes.
    expect(f.core.tick().stops.map((s) => [s.model, s.reason])).toEqual([["idle-free", "idle"]]);
    f.clock.advance(50);
    expect(f.core.tick().stops).toEqual([]);
    f.core.holdEvictions("n1", false);
    f.clock.advance(50);
    expect(
      f.core
        .tick()
        .stops.map((s) => [s.model, s.reason])
        .sort(),
    ).toEqual([
      ["busy-held", "busy"],
      ["idle-held", "idle"],
    ]);
  });
});
