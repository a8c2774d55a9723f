import { describe, expect, it } from "vitest";
import { runSeed } from "./run/run-seed.js";
import type { SimProfile } from "./run/sim-options.js";

/**
 * Seeds that once failed, each kept as a permanent regression test with the
 * profile it failed in (see the report of issue 13). Every one failed before its fix.
 */
const regressionSeeds: readonly (readonly [number, SimProfile, string])[] = [
  // Port recycled while the loader still held the old incarnation: adopting the new one threw from
  // NodeTable.heartbeat (and left a half-adopted held instance). Fixed in loader adoption.ts.
  [2, "long", "adoption on a recycled address"],
  // Simulator: a crashed generation's late load failure wrote to the simulated disk; the torn-tail cut
  // then dropped fsync'd records after it, and an acknowledged evictionStarted never reached the stream.
  [1, "long", "a crash never drops an fsync'd journal record"],
  // Checker: calls open when an operator forgot an instance were counted against its re-adopted self.
  [10, "long", "forget resets the call count (LRU)"],
  [17, "long", "forget resets the call count (memory)"],
  [37, "long", "forget resets the call count (LRU, 2)"],
  // Simulator: a report sent to a crashed generation was handed to its successor, re-adopting an
  // incarnation the old generation had confirmed stopped.
  [36, "long", "messages die with the generation they were sent to"],
  // NodeTable measured lost-after from the last heartbeat: after a coordinator stall past grace +
  // lost-after, a node went ready → lost in one checkHealth once the mass-unreachability guard was
  // off (or lifted). Lost-after now counts from when the node was seen unreachable.
  [818, "short", "a stalled coordinator loses no node on waking"],
  // Checker: judged a lost node when its event was delivered; a stall had held the event while
  // the heartbeats of the stall's end came in. Now judged in the step of the decision.
  [557, "short", "node-lost judged at decision time"],
  [40, "short", "node-lost judged at decision time (2)"],
  // Checker: a node that had just registered (its record new, as Warden counts it heard) was taken as silent.
  [617, "short", "a registration is contact"],
  // Checker: evictions were judged when the audit event was delivered, against the policy and the
  // calls of that moment; a stall or a policy change in between made idle/busy decisions look early.
  // Now judged when the loader emits eviction.started.
  [269, "short", "idle eviction judged against the policy it used"],
  [976, "short", "busy eviction judged against the calls it saw"],
];

describe("simulation", () => {
  it("is deterministic: the same seed twice gives the same trace hash", async () => {
    const a = await runSeed(11);
    const b = await runSeed(11);
    expect(a.steps).toBeGreaterThan(1_000);
    expect(b.traceHash).toBe(a.traceHash);
    expect(b.steps).toBe(a.steps);
    const c = await runSeed(12);
    expect(c.traceHash).not.toBe(a.traceHash);
  });

  it.each(regressionSeeds)("regression seed %i (%s profile: %s) holds every invariant", async (seed, profile) => {
    const r = await runSeed(seed, { profile });
    expect(r.violations).toEqual([]);
  }, 120_000);
});
