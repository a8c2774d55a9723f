import { describe, expect, it } from "vitest";
import { createWatchdogCore } from "./index.js";

describe("WatchdogCore.forEachOfModel", () => {
  it("visits every instance of the model once with its state, as the views say, and nothing of other models", () => {
    const core = createWatchdogCore({ clock: { now: () => 0 }, loader: { hasModelAtAddress: () => true }, policy: {} });
    for (let i = 0; i < 5; i++) core.registerReady({ nodeId: `n${String(i)}`, model: "m", incarnation: `r${String(i)}`, address: `10.0.0.${String(i)}:1`, sizeBytes: 1 });
    core.registerLoading({ nodeId: "n9", model: "m", incarnation: "l0", address: "10.0.0.9:1", sizeBytes: 1 });
    core.registerReady({ nodeId: "n0", model: "other", incarnation: "o0", address: "10.0.1.0:1", sizeBytes: 1 });
    const seen: [string, string][] = [];
    core.forEachOfModel("m", (inc, state) => seen.push([inc, state]));
    const views = core.instancesOfModel("m").map((v) => [v.incarnation, v.pendingEviction !== undefined ? "pending" : v.state]);
    expect(seen.sort()).toEqual(views.sort());
    expect(seen.map(([, s]) => s).sort()).toEqual(["loading", "ready", "ready", "ready", "ready", "ready"]);
    const none: string[] = [];
    core.forEachOfModel("absent", (inc) => none.push(inc));
    expect(none).toEqual([]);
  });
});
