import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { OutageProbes, type DueProbe } from "./outage-probes.js";

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

describe("OutageProbes.takeDue: a due queue, bounded, the same probes as a scan", () => {
  it("a bound leaves the rest due for the next call, first probes of a newly unreachable node ahead of repeats", () => {
    const p = new OutageProbes({ intervalMs: 100 });
    p.nodeUnreachable("n1", ["a", "b", "c"], 0);
    expect(p.takeDue(0, 2).map((d) => d.incarnation)).toEqual(["a", "b"]);
    expect(p.takeDue(0, 2).map((d) => d.incarnation)).toEqual(["c"]);
    const [a] = p.takeDue(0);
    expect(a).toBeUndefined();
    // "a" answers at 10 (next due 110); a node turning unreachable at 50 is probed first at 120 although "a" is due earlier.
    p.probed({ incarnation: "a", nodeId: "n1", generation: 1 }, undefined, 10);
    p.nodeUnreachable("n2", ["d"], 50);
    expect(p.takeDue(120, 1).map((d) => d.incarnation)).toEqual(["d"]);
    expect(p.takeDue(120).map((d) => d.incarnation)).toEqual(["a"]);
  });

  it("property: every call returns min(bound, due) probes, all due and none in flight; with no bound exactly what a scan of every entry returns", () => {
    type Op =
      | { t: "down"; node: number; incs: number[]; advanceMs: number }
      | { t: "take"; max: number | undefined; advanceMs: number }
      | { t: "answer"; pick: number; fail: boolean; advanceMs: number }
      | { t: "forget"; inc: number }
      | { t: "settle"; node: number };
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ t: fc.constant("down" as const), node: fc.nat(3), incs: fc.array(fc.nat(11), { maxLength: 4 }), advanceMs: fc.nat(120) }),
      fc.record({ t: fc.constant("take" as const), max: fc.option(fc.integer({ min: 0, max: 4 }), { nil: undefined }), advanceMs: fc.nat(120) }),
      fc.record({ t: fc.constant("answer" as const), pick: fc.nat(20), fail: fc.boolean(), advanceMs: fc.nat(120) }),
      fc.record({ t: fc.constant("forget" as const), inc: fc.nat(11) }),
      fc.record({ t: fc.constant("settle" as const), node: fc.nat(3) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const p = new OutageProbes({ intervalMs: 100 });
        // The reference: every entry's due time and whether it is in flight, scanned whole.
        const ref = new Map<string, { node: string; dueAtMs: number; inFlight: boolean }>();
        let inFlight: DueProbe[] = [];
        let now = 0;
        for (const o of ops) {
          if ("advanceMs" in o) now += o.advanceMs;
          switch (o.t) {
            case "down": {
              const node = `n${String(o.node)}`;
              const incs = o.incs.map((i) => `i${String(i)}`);
              p.nodeUnreachable(node, incs, now);
              for (const inc of incs) if (!ref.has(inc)) ref.set(inc, { node, dueAtMs: now, inFlight: false });
              break;
            }
            case "take": {
              const due = [...ref].filter(([, e]) => !e.inFlight && e.dueAtMs <= now).map(([inc]) => inc);
              const got = p.takeDue(now, o.max);
              const names = got.map((d) => d.incarnation);
              expect(names.length).toBe(Math.min(o.max ?? Number.POSITIVE_INFINITY, due.length));
              expect(new Set(names).size).toBe(names.length);
              for (const n of names) expect(due).toContain(n);
              if (o.max === undefined) expect([...names].sort()).toEqual([...due].sort());
              for (const d of got) (ref.get(d.incarnation) as { inFlight: boolean }).inFlight = true;
              inFlight.push(...got);
              break;
            }
            case "answer": {
              const d = inFlight[o.pick % Math.max(1, inFlight.length)];
              if (d === undefined) break;
              inFlight = inFlight.filter((x) => x !== d);
              p.probed(d, o.fail ? "refused" : undefined, now);
              const e = ref.get(d.incarnation);
              if (e !== undefined && e.inFlight) {
                e.inFlight = false;
                e.dueAtMs = now + 100;
              }
              break;
            }
            case "forget": {
              p.forget(`i${String(o.inc)}`);
              ref.delete(`i${String(o.inc)}`);
              inFlight = inFlight.filter((x) => x.incarnation !== `i${String(o.inc)}`);
              break;
            }
            case "settle": {
              const node = `n${String(o.node)}`;
              p.nodeSettled(node);
              for (const [inc, e] of ref) if (e.node === node) ref.delete(inc);
              inFlight = inFlight.filter((x) => x.nodeId !== node);
              break;
            }
          }
          expect(p.size).toBe(ref.size);
        }
      }),
      { numRuns: 300 },
    );
  });
});
