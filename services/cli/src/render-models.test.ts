import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { InstanceState, ModelInstanceSchema, NodeSchema, NodeState, OutageServing } from "@warden/proto";
import { instanceStateText, modelsTable, nodesTable } from "./render.js";

describe("models ls rendering", () => {
  it("shows the node's state with instances on an unreachable or lost node, not a plain ready", () => {
    const row = (nodeState: NodeState) => create(ModelInstanceSchema, { model: "m1", nodeId: "n1", state: InstanceState.READY, nodeState });
    expect(instanceStateText(row(NodeState.READY))).toBe("ready");
    expect(instanceStateText(row(NodeState.UNSPECIFIED))).toBe("ready");
    expect(instanceStateText(row(NodeState.UNREACHABLE))).toBe("ready (node unreachable)");
    expect(instanceStateText(row(NodeState.LOST))).toBe("ready (node lost)");
    expect(modelsTable([row(NodeState.UNREACHABLE)], 0)).toContain("ready (node unreachable)");
    expect(modelsTable([row(NodeState.READY)], 0)).not.toContain("unreachable");
  });

  it("says when an instance serves through its agent's outage, or its health probe failed; nodes ls counts the serving ones", () => {
    const row = (outageServing: OutageServing) => create(ModelInstanceSchema, { model: "m1", nodeId: "n1", state: InstanceState.READY, nodeState: NodeState.UNREACHABLE, outageServing });
    expect(instanceStateText(row(OutageServing.SERVING))).toBe("ready (serving, agent unreachable)");
    expect(instanceStateText(row(OutageServing.PROBE_FAILED))).toBe("ready (agent unreachable, health probe failed)");
    expect(instanceStateText(row(OutageServing.UNSPECIFIED))).toBe("ready (node unreachable)");
    expect(nodesTable([create(NodeSchema, { nodeId: "n1", state: NodeState.UNREACHABLE, servingThroughOutage: 2 })], 0)).toContain("unreachable (2 serving)");
  });

  it("says when an instance's node has not reported since the coordinator restarted (nodes ls and models ls alike)", () => {
    const leftover = create(ModelInstanceSchema, { model: "m1", nodeId: "n1", state: InstanceState.LEFTOVER, nodeState: NodeState.NOT_REPORTED });
    expect(instanceStateText(leftover)).toBe("leftover (node not reported since restart)");
    expect(nodesTable([create(NodeSchema, { nodeId: "n1", state: NodeState.NOT_REPORTED, draining: true })], 0)).toContain("not reported since restart");
  });
});
