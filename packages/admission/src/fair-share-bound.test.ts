import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { plantBugs } from "@warden/common/testing/planted-bugs";
import { AdmissionQueue } from "./admission-queue.js";
import { FairShareBound } from "./fair-share-bound.js";
import { priorityClasses, type PriorityClass } from "./admission-types.js";

type Op =
  | { readonly t: "enter"; readonly cls: PriorityClass; readonly p: string }
  | { readonly t: "leave" }
  | { readonly t: "cancel"; readonly k: number }
  | { readonly t: "capacity"; readonly c: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ t: fc.constant("enter" as const), cls: fc.constantFrom(...priorityClasses), p: fc.constantFrom("A", "B", "C", "D") }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant("leave" as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("cancel" as const), k: fc.nat(300) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("capacity" as const), c: fc.integer({ min: 1, max: 4 }) }) },
);

/** Runs `ops` through a queue and the bound; returns the bound's first complaints (empty: it held). */
function run(ops: readonly Op[], capacity0: number, maxQueued: number, shedAtQueued: number): string[] {
  const q = new AdmissionQueue<number>();
  const bound = new FairShareBound<number>();
  const who = new Map<number, { cls: PriorityClass; p: string }>();
  let capacity = capacity0;
  const L = () => ({ capacity, shedAtQueued: Math.min(shedAtQueued, maxQueued), maxQueued, maxQueuedPerPrincipal: maxQueued });
  let inFlight = 0;
  let next = 0;
  const complaints: string[] = [];
  const admit = (ts: readonly number[]): void => {
    for (const t of ts) {
      const w = who.get(t);
      if (w !== undefined) complaints.push(...bound.admitted(t, w.cls, w.p));
      inFlight++;
    }
  };
  for (const o of ops) {
    if (o.t === "enter") {
      const t = next++;
      who.set(t, { cls: o.cls, p: o.p });
      const r = q.enter(t, o.cls, o.p, L());
      if (r.pushedOut !== undefined) bound.gone(r.pushedOut.ticket);
      if (r.t === "admitted") admit([t]);
      else if (r.t === "queued") bound.queued(t, o.cls, o.p);
    } else if (o.t === "leave") {
      if (inFlight === 0) continue;
      inFlight--;
      admit(q.leave(L()));
    } else if (o.t === "cancel") {
      const t = o.k % Math.max(1, next);
      if (q.cancel(t)) bound.gone(t);
    } else {
      capacity = o.c;
      admit(q.pump(L()));
    }
    if (complaints.length > 0) return complaints;
  }
  return complaints;
}

const args = [fc.array(op, { maxLength: 300, size: "large" }), fc.integer({ min: 1, max: 3 }), fc.integer({ min: 1, max: 24 }), fc.integer({ min: 0, max: 24 })] as const;

describe("the fair-share bound within a class", () => {
  it("property: while a call waits with k of its principal's calls ahead, no other principal of its class gets more than k + 1 let in", () => {
    fc.assert(
      fc.property(...args, (ops, capacity, maxQueued, shed) => {
        expect(run(ops, capacity, maxQueued, shed)).toEqual([]);
      }),
      { numRuns: 1_000 },
    );
  });

  it("a flood delays another principal's first call by one turn: A's ten waiting calls let one in before B's", () => {
    const q = new AdmissionQueue<string>();
    const bound = new FairShareBound<string>();
    const L = { capacity: 1, shedAtQueued: 100, maxQueued: 100, maxQueuedPerPrincipal: 100 };
    q.enter("busy", "standard", "A", L);
    for (let i = 0; i < 10; i++) {
      q.enter(`A${String(i)}`, "standard", "A", L);
      bound.queued(`A${String(i)}`, "standard", "A");
    }
    q.enter("B0", "standard", "B", L);
    bound.queued("B0", "standard", "B");
    const order = [...q.leave(L), ...q.leave(L)];
    expect(order).toEqual(["A0", "B0"]);
    expect(bound.admitted("A0", "standard", "A")).toEqual([]);
    expect(bound.admitted("B0", "standard", "B")).toEqual([]);
  });

  it("the bound is not vacuous: a queue that lets a principal keep its turn breaks it, and higher classes or the call's own principal do not count", () => {
    const bound = new FairShareBound<string>();
    for (const t of ["A0", "A1", "A2"]) bound.queued(t, "standard", "A");
    bound.queued("B0", "standard", "B");
    bound.queued("C0", "critical", "C");
    expect(bound.admitted("C0", "critical", "C")).toEqual([]);
    expect(bound.admitted("A0", "standard", "A")).toEqual([]);
    expect(bound.admitted("A1", "standard", "A")[0]).toMatch(/a standard call of B waited through 2 admissions of A's standard calls \(bound 1: 0 of its own calls were ahead of it\)/);
    bound.gone("B0");
    expect(bound.admitted("A2", "standard", "A")).toEqual([]);
    expect(bound.size).toBe(0);
  });

  it("the planted bug admission-principal-keeps-turn is caught by the property", () => {
    const undo = plantBugs(["admission-principal-keeps-turn"]);
    try {
      const r = fc.check(fc.property(...args, (ops, capacity, maxQueued, shed) => run(ops, capacity, maxQueued, shed).length === 0), { numRuns: 1_000, seed: 1 });
      expect(r.failed).toBe(true);
    } finally {
      undo();
    }
  });
});
