import { describe, expect, it } from "vitest";
import { planPlacement } from "./index.js";
import { GiB, node } from "./node-candidate.fixture.js";

const req = { model: "m", sizeBytes: GiB, selector: { gpu: "a100" } };

describe("a node ruled out only by a state that ends is waitable", () => {
  it("draining or unreachable with a matching selector: waitable (a load waits for it)", () => {
    const plan = planPlacement(req, [node({ nodeId: "d", draining: true, labels: { gpu: "a100" } }), node({ nodeId: "u", state: "unreachable", labels: { gpu: "a100" } })], "binpack", { explain: true });
    expect(plan.t).toBe("no-fit");
    expect(plan.verdicts.map((v) => [v.nodeId, v.waitable, v.reason])).toEqual([
      ["d", true, "node is draining"],
      ["u", true, "node is unreachable"],
    ]);
  });

  it("a selector that does not match, a missing backend, or a lost node: not waitable (refused as before)", () => {
    const plan = planPlacement({ ...req, backend: "vllm" }, [node({ nodeId: "s", draining: true, labels: { gpu: "h100" } }), node({ nodeId: "b", draining: true, labels: { gpu: "a100" }, backends: new Set(["llama"]) }), node({ nodeId: "l", state: "lost", labels: { gpu: "a100" } })], "binpack", { explain: false });
    expect(plan.verdicts.map((v) => v.waitable)).toEqual([undefined, undefined, undefined]);
  });
});
