import { describe, expect, it } from "vitest";
import { modelSpec } from "@warden/loader";
import { PlacementView, type PlacementNode } from "./placement-view.js";

const node = (nodeId: string, state: PlacementNode["state"], labels: Record<string, string> = {}): PlacementNode => ({ nodeId, state, draining: false, labels, resources: undefined, backends: new Set() });

const viewOf = (nodes: PlacementNode[]): PlacementView => new PlacementView({ list: () => nodes, limitsOf: () => ({}) }, "binpack");

/**
 * A load that finds no node is transient (UNAVAILABLE) when no node could
 * judge the model — none registered yet, or every one unreachable, as while a
 * new leader's agents re-register — or when a node the model could use is out
 * for a state that ends (draining, unreachable); permanent (FAILED_PRECONDITION)
 * when ready nodes judged it and none can take it.
 */
describe("PlacementView.choose: transient or not", () => {
  const spec = modelSpec({ id: "m", backend: "sim", selector: { gpu: "a100" } });

  it("no node registered: transient", () => {
    expect(viewOf([]).choose(spec)).toMatchObject({ nodeId: undefined, reason: "no node is registered", transient: true });
  });

  it("every node unreachable: transient", () => {
    expect(viewOf([node("a", "unreachable", { gpu: "a100" })]).choose(spec)).toMatchObject({ nodeId: undefined, transient: true });
  });

  it("a ready node that the model's selector rules out, the matching one lost: not transient", () => {
    const c = viewOf([node("a", "ready", { gpu: "t4" }), node("b", "lost", { gpu: "a100" })]).choose(spec);
    expect(c.nodeId).toBeUndefined();
    expect("transient" in c).toBe(false);
  });

  it("the only matching node unreachable or draining while another ready node does not match: transient (it may come back)", () => {
    const unreachable = viewOf([node("a", "ready", { gpu: "t4" }), node("b", "unreachable", { gpu: "a100" })]).choose(spec);
    expect(unreachable).toMatchObject({ nodeId: undefined, transient: true });
    const draining = viewOf([node("a", "ready", { gpu: "t4" }), { ...node("b", "ready", { gpu: "a100" }), draining: true }]).choose(spec);
    expect(draining).toMatchObject({ nodeId: undefined, transient: true });
    expect(draining.nodeId === undefined ? draining.reason : "").toContain("b: node is draining");
  });
});
