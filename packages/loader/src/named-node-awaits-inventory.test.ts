import { describe, expect, it } from "vitest";
import { createHarness } from "./test-fakes.js";

// An operator's load naming a node went straight to that node. After a takeover
// the node may have registered with the new leader and not yet sent its first
// inventory, while it runs a backend the previous leader started and never
// journaled: the load started beside it (over the per-node limit, or beside a
// member of its exclusive group). Placement waits for such a node; so does a
// load that names it.

describe("a load naming a node that has not reported since it registered", () => {
  it("waits for the node's first inventory, then starts there", async () => {
    const h = createHarness();
    h.placement.awaiting.add("n2");
    const load = h.track(h.loader.ensureLoaded("m1", h.never, "n2"));
    await h.run(5_000);
    expect(load.done()).toBe(false);
    expect(h.n2.starts.length).toBe(0);
    h.placement.awaiting.delete("n2");
    await h.until(() => load.done());
    expect(load.value().nodeId).toBe("n2");
    expect(h.n2.starts.map((s) => s.request.model)).toEqual(["m1"]);
  });
});
