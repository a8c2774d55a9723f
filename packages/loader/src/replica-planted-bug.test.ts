import { plantBugs } from "@warden/common/testing/planted-bugs";
import { afterEach, describe, expect, it } from "vitest";
import { decideReplicas, type ReplicaView } from "./replica-reconciler.js";

let undo: (() => void) | undefined;
afterEach(() => {
  undo?.();
  undo = undefined;
});

// Three ready replicas of a min-3 model, all idle past scaleDownAfterMs.
const atMin: ReplicaView = {
  min: 3,
  max: 4,
  stopping: 0,
  scaleDownAfterMs: 1_000,
  live: 3,
  ready: 3,
  loadInFlight: false,
  breakerAllows: true,
  idle: [
    { incarnation: "a", idleSinceMs: 1_000 },
    { incarnation: "b", idleSinceMs: 2_000 },
    { incarnation: "c", idleSinceMs: 3_000 },
  ],
  nowMs: 10_000,
};

describe("planted bug scale-down-below-min", () => {
  it("off: a model at min is never scaled down; on: its idle-longest replica is", () => {
    expect(decideReplicas(atMin)).toEqual({ t: "none" });
    undo = plantBugs(["scale-down-below-min"]);
    expect(decideReplicas(atMin)).toEqual({ t: "scale-down", incarnation: "a" });
  });
});
