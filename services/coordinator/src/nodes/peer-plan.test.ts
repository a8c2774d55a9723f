import { describe, expect, it } from "vitest";
import { PeerPlan } from "./peer-plan.js";

describe("PeerPlan", () => {
  it("eight agents at once make a tree of fan-out 2: one from the origin", () => {
    const p = new PeerPlan(2);
    const got = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"].map((n) => p.assign("d", n, []));
    expect(got).toEqual([undefined, "n0", "n0", "n1", "n1", "n2", "n2", "n3"]);
  });

  it("prefers holders in the caller's order, then pulls in progress; never the requester itself", () => {
    const p = new PeerPlan(1);
    expect(p.assign("d", "a", ["a", "h1", "h2"])).toBe("h1");
    expect(p.assign("d", "b", ["h1", "h2"])).toBe("h2");
    expect(p.assign("d", "c", ["h1", "h2"])).toBe("a");
    expect(p.assign("d", "e", ["h1", "h2"])).toBe("b");
  });

  it("a pull that ends frees its peer's slot and stops being a source; the same requester keeps its peer", () => {
    const p = new PeerPlan(1);
    expect(p.assign("d", "a", [])).toBeUndefined();
    expect(p.assign("d", "b", [])).toBe("a");
    expect(p.assign("d", "b", [])).toBe("a");
    expect(p.assign("d", "c", [])).toBe("b");
    p.done("d", "b");
    p.done("d", "b");
    expect(p.assign("d", "e", [])).toBe("a");
    p.done("d", "a");
    p.done("d", "c");
    p.done("d", "e");
    expect(p.size()).toBe(0);
  });
});
