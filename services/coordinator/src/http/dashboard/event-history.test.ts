import { describe, expect, it } from "vitest";
import { EventHistory } from "./event-history.js";

const ev = (i: number, type = "instance.ready", nodeId = "n1", model = "m"): { type: string; id: string; nodeId: string; model: string } => ({ type, id: String(i), nodeId, model });

describe("EventHistory (the Events page's bounded ring)", () => {
  it("keeps the newest `capacity` events, oldest first, and never more", () => {
    const h = new EventHistory(3);
    for (let i = 1; i <= 5; i++) h.add(ev(i));
    expect(h.size).toBe(3);
    expect(h.read({}, 10).map((e) => e.id)).toEqual(["3", "4", "5"]);
    expect(h.read({}, 2).map((e) => e.id)).toEqual(["4", "5"]);
  });

  it("filters by node, model and type (exact or a prefix ending in '.')", () => {
    const h = new EventHistory(10);
    h.add(ev(1, "eviction.started", "a", "x"));
    h.add(ev(2, "eviction.stopped", "b", "x"));
    h.add(ev(3, "instance.ready", "a", "y"));
    expect(h.read({ nodeId: "a" }, 10).map((e) => e.id)).toEqual(["1", "3"]);
    expect(h.read({ model: "x", nodeId: "b" }, 10).map((e) => e.id)).toEqual(["2"]);
    expect(h.read({ types: ["eviction."] }, 10).map((e) => e.id)).toEqual(["1", "2"]);
    expect(h.read({ types: ["instance.ready", "eviction.stopped"] }, 10).map((e) => e.id)).toEqual(["2", "3"]);
    expect(h.read({ types: ["eviction"] }, 10)).toEqual([]);
  });

  it("refuses a capacity that is not a positive integer", () => {
    expect(() => new EventHistory(0)).toThrow(/positive integer/);
  });
});
