/**
 * PlacementView with instances a restarted coordinator knows only from its
 * journal, on a node that has not reported yet (the loader pushes them to the
 * watchdog as `unconfirmed` occupancy): a load of another member of their
 * exclusive group, or one their memory leaves no room for, goes to another
 * node; with no other node the node stays the (eligible) target so admission
 * waits there for its report. Pure: a real WatchdogCore, no processes.
 */
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { modelSpec, type Loader, type ModelSpec } from "@warden/loader";
import { NodeResourcesSchema } from "@warden/proto";
import { createWatchdogCore, type OccupancyEntry } from "@warden/watchdog";
import { PlacementView, type PlacementNode } from "./placement-view.js";

const GiB = 1024 ** 3;

function view(nodeIds: readonly string[], gpuGiB: number) {
  const core = createWatchdogCore({ clock: { now: () => 1_000 }, loader: { hasModelAtAddress: () => true } });
  const list: PlacementNode[] = nodeIds.map((nodeId) => ({
    nodeId,
    state: "ready",
    draining: false,
    labels: {},
    backends: new Set<string>(),
    resources: create(NodeResourcesSchema, { gpus: [{ index: 0, name: "fake", totalBytes: BigInt(gpuGiB * GiB), usedBytes: 0n }] }),
  }));
  const loader = { core, getPolicy: () => core.getPolicy(), leftoverList: () => [], startingElsewhere: () => [].values(), journalReplicas: { ofModel: () => [].values() } } as unknown as Loader;
  const v = new PlacementView({ list: () => list, limitsOf: () => ({}) }, "binpack");
  v.attach(loader);
  return { core, view: v };
}

const unconfirmed = (model: string, groups: readonly string[], sizeBytes: number): OccupancyEntry => ({ kind: "unconfirmed", key: `J-${model}`, model, groups, sizeBytes });
const spec = (init: Partial<ModelSpec>): ModelSpec => modelSpec({ id: "m2", backend: "backend-sim", sizeBytes: GiB, ...init });

describe("PlacementView: unconfirmed instances on a node not reported yet", () => {
  it("an exclusive group member there: the other member is placed on another node", () => {
    const { core, view: v } = view(["a", "b"], 8);
    core.setNodeOccupancy("a", [unconfirmed("m1", ["gpu0"], GiB)]);
    const s = spec({ groups: ["gpu0"] });
    expect(v.plan(s)).toMatchObject({ t: "place", nodeId: "b" });
    expect(v.plan(s).verdicts.find((x) => x.nodeId === "a")?.reason).toContain("unconfirmed m1");
  });

  it("the only node: it stays the target (eligible, not fitting) so admission waits there for its report", () => {
    const { core, view: v } = view(["a"], 8);
    core.setNodeOccupancy("a", [unconfirmed("m1", ["gpu0"], GiB)]);
    const s = spec({ groups: ["gpu0"] });
    expect(v.plan(s).t).toBe("no-fit");
    expect(v.choose(s)).toEqual({ nodeId: "a" });
  });

  it("memory: its size is on the node's budget, so a model it leaves no room for goes elsewhere", () => {
    const { core, view: v } = view(["a", "b"], 2);
    // binpack prefers the fuller node: a, while 1 GiB still fits beside its unconfirmed instance.
    core.setNodeOccupancy("a", [unconfirmed("m1", [], GiB / 2)]);
    expect(v.plan(spec({}))).toMatchObject({ t: "place", nodeId: "a" });
    core.setNodeOccupancy("a", [unconfirmed("m1", [], 1.5 * GiB)]);
    expect(v.plan(spec({}))).toMatchObject({ t: "place", nodeId: "b" });
  });
});
