import { describe, expect, it } from "vitest";
import { decideReplicas, type ReplicaView } from "./replica-reconciler.js";

// Two ready replicas of a model whose max an operator just lowered to 1; both idle for 1 s of a 5 min scaleDownAfter.
const lowered: ReplicaView = {
  min: 0,
  max: 1,
  stopping: 0,
  scaleDownAfterMs: 300_000,
  live: 2,
  ready: 2,
  loadInFlight: false,
  breakerAllows: true,
  idle: [
    { incarnation: "a", idleSinceMs: 9_000 },
    { incarnation: "b", idleSinceMs: 8_500 },
  ],
  nowMs: 10_000,
};

describe("a lowered max", () => {
  it("stops the idle-longest replica at once instead of after scaleDownAfter", () => {
    expect(decideReplicas(lowered)).toEqual({ t: "scale-down", incarnation: "b" });
  });

  it("never takes a busy replica: with none idle it waits", () => {
    expect(decideReplicas({ ...lowered, idle: [] })).toEqual({ t: "none" });
  });

  it("at max, an idle replica still waits its scaleDownAfter", () => {
    expect(decideReplicas({ ...lowered, max: 2 })).toEqual({ t: "none" });
  });
});
