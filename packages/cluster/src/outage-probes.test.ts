import { describe, expect, it } from "vitest";
import { OutageProbes } from "./outage-probes.js";

describe("serving through an agent outage (OutageProbes)", () => {
  it("an unreachable node's instances are routable until a probe fails, and again once one answers", () => {
    const p = new OutageProbes({ intervalMs: 1000 });
    expect(p.routable("a")).toBe(false);
    p.nodeUnreachable("n1", ["a", "b"], 0);
    // Routable from the transition on: the silence is the agent's; the first probes are due at once.
    expect(p.routable("a") && p.routable("b")).toBe(true);
    const due = p.takeDue(0);
    expect(due.map((d) => d.incarnation)).toEqual(["a", "b"]);
    // In flight: not handed out twice.
    expect(p.takeDue(5000)).toEqual([]);
    const [a, b] = due as [(typeof due)[0], (typeof due)[0]];
    expect(p.probed(a, undefined, 10)).toBeUndefined();
    expect(p.probed(b, "connection refused", 10)).toEqual({ t: "failed", incarnation: "b", nodeId: "n1", reason: "connection refused" });
    expect(p.routable("a")).toBe(true);
    expect(p.routable("b")).toBe(false);
    expect(p.servingOn("n1")).toBe(1);
    expect(p.stateOf("a")).toMatchObject({ t: "serving", answered: true });
    // Next probes one interval after the answer.
    expect(p.takeDue(1009)).toEqual([]);
    const again = p.takeDue(1010);
    expect(again.map((d) => d.incarnation)).toEqual(["a", "b"]);
    const b2 = again[1] as (typeof again)[0];
    expect(p.probed(b2, undefined, 1020)).toEqual({ t: "recovered", incarnation: "b", nodeId: "n1" });
    expect(p.routable("b")).toBe(true);
  });

  it("the node back or lost ends its probes; an answer from before is ignored, even after the node left again", () => {
    const p = new OutageProbes();
    p.nodeUnreachable("n1", ["a"], 0);
    p.nodeUnreachable("n2", ["c"], 0);
    const [old] = p.takeDue(0);
    expect(p.nodeSettled("n1")).toEqual(["a"]);
    expect(p.routable("a")).toBe(false);
    expect(p.size).toBe(1);
    p.nodeUnreachable("n1", ["a"], 100);
    // The stale failure belongs to the previous outage: the new entry keeps its word.
    expect(p.probed(old as NonNullable<typeof old>, "deadline exceeded", 200)).toBeUndefined();
    expect(p.routable("a")).toBe(true);
    p.forget("a");
    expect(p.routable("a")).toBe(false);
    expect(p.servingOn("n1")).toBe(0);
    expect(p.routable("c")).toBe(true);
  });

  it("work is proportional to the probed instances: nothing else is looked at, nothing due twice", () => {
    const p = new OutageProbes({ intervalMs: 50 });
    p.nodeUnreachable("n1", ["a"], 0);
    p.nodeUnreachable("n1", ["a", "b"], 10);
    expect(p.size).toBe(2);
    expect(p.takeDue(10).length).toBe(2);
    expect(p.takeDue(10).length).toBe(0);
  });
});
