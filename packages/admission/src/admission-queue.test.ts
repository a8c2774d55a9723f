import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { AdmissionQueue } from "./admission-queue.js";
import { admissionLimits, admissionSettings, callClass, priorityClasses, type AdmissionLimits, type PriorityClass } from "./admission-types.js";

const limits = (o: Partial<AdmissionLimits> = {}): AdmissionLimits => ({ capacity: 2, shedAtQueued: 4, maxQueued: 8, maxQueuedPerPrincipal: 8, ...o });

describe("AdmissionQueue", () => {
  it("admits up to capacity, then queues; a leave lets the next in", () => {
    const q = new AdmissionQueue<string>();
    const L = limits();
    expect(q.enter("a", "standard", "p", L).t).toBe("admitted");
    expect(q.enter("b", "standard", "p", L).t).toBe("admitted");
    expect(q.enter("c", "standard", "p", L).t).toBe("queued");
    expect(q.inFlight).toBe(2);
    expect(q.leave(L)).toEqual(["c"]);
    expect(q.inFlight).toBe(2);
    expect(q.queued).toBe(0);
  });

  it("serves critical before standard before sheddable, whatever the arrival order", () => {
    const q = new AdmissionQueue<string>();
    const L = limits({ capacity: 1, shedAtQueued: 100, maxQueued: 100 });
    q.enter("busy", "standard", "p", L);
    q.enter("s1", "sheddable", "p", L);
    q.enter("st1", "standard", "p", L);
    q.enter("c1", "critical", "p", L);
    q.enter("st2", "standard", "p", L);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) order.push(...q.leave(L));
    expect(order).toEqual(["c1", "st1", "st2", "s1"]);
  });

  it("shares a class round robin between principals: a flood from one does not delay another by more than one turn", () => {
    const q = new AdmissionQueue<string>();
    const L = limits({ capacity: 1, maxQueued: 100, shedAtQueued: 100, maxQueuedPerPrincipal: 100 });
    q.enter("busy", "standard", "A", L);
    for (let i = 0; i < 10; i++) q.enter(`A${String(i)}`, "standard", "A", L);
    q.enter("B0", "standard", "B", L);
    q.enter("B1", "standard", "B", L);
    const order: string[] = [];
    for (let i = 0; i < 5; i++) order.push(...q.leave(L));
    expect(order).toEqual(["A0", "B0", "A1", "B1", "A2"]);
  });

  it("refuses sheddable calls at once past shedAtQueued, and any call of a principal past its share", () => {
    const q = new AdmissionQueue<string>();
    const L = limits({ capacity: 1, shedAtQueued: 2, maxQueued: 10, maxQueuedPerPrincipal: 3 });
    q.enter("busy", "standard", "A", L);
    q.enter("a1", "standard", "A", L);
    q.enter("a2", "standard", "A", L);
    const shed = q.enter("s", "sheddable", "B", L);
    expect(shed.t).toBe("refused");
    expect(shed.t === "refused" && shed.why).toMatch(/sheddable/);
    q.enter("a3", "standard", "A", L);
    const over = q.enter("a4", "standard", "A", L);
    expect(over.t === "refused" && over.why).toMatch(/already has 3 calls waiting/);
    expect(q.enter("b1", "standard", "B", L).t).toBe("queued");
  });

  it("a full queue: a critical arrival pushes out the newest sheddable waiter; a sheddable arrival is refused", () => {
    const q = new AdmissionQueue<string>();
    const L = limits({ capacity: 1, shedAtQueued: 10, maxQueued: 2 });
    q.enter("busy", "standard", "A", L);
    q.enter("s1", "sheddable", "A", L);
    q.enter("s2", "sheddable", "A", L);
    expect(q.enter("s3", "sheddable", "B", L).t).toBe("refused");
    const c = q.enter("c", "critical", "B", L);
    expect(c.t).toBe("queued");
    expect(c.pushedOut?.ticket).toBe("s2");
    expect(q.leave(L)).toEqual(["c"]);
    expect(q.leave(L)).toEqual(["s1"]);
  });

  it("a cancelled waiter leaves no trace: never admitted, its principal's turn passes on", () => {
    const q = new AdmissionQueue<string>();
    const L = limits({ capacity: 1 });
    q.enter("busy", "standard", "A", L);
    q.enter("a1", "standard", "A", L);
    q.enter("b1", "standard", "B", L);
    expect(q.cancel("a1")).toBe(true);
    expect(q.cancel("a1")).toBe(false);
    expect(q.leave(L)).toEqual(["b1"]);
    expect(q.queued).toBe(0);
    q.enter("a2", "standard", "A", L);
    expect(q.leave(L)).toEqual(["a2"]);
  });

  it("pump admits waiters when the capacity grew", () => {
    const q = new AdmissionQueue<string>();
    q.enter("x", "standard", "A", limits({ capacity: 1 }));
    q.enter("y", "standard", "A", limits({ capacity: 1 }));
    q.enter("z", "standard", "A", limits({ capacity: 1 }));
    expect(q.pump(limits({ capacity: 3 }))).toEqual(["y", "z"]);
  });

  it("property: capacity is never exceeded, a lower class never goes first while a higher one waits, every ticket ends in exactly one place", () => {
    const op = fc.oneof(
      fc.record({ t: fc.constant("enter" as const), cls: fc.constantFrom(...priorityClasses), p: fc.constantFrom("A", "B", "C") }),
      fc.record({ t: fc.constant("leave" as const) }),
      fc.record({ t: fc.constant("cancel" as const), k: fc.nat(200) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200, size: "large" }), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 6 }), fc.integer({ min: 1, max: 8 }), (ops, capacity, shedAtQueued, maxQueued) => {
        const L = { capacity, shedAtQueued: Math.min(shedAtQueued, maxQueued), maxQueued, maxQueuedPerPrincipal: Math.max(1, maxQueued - 1) };
        const q = new AdmissionQueue<number>();
        const classOf = new Map<number, PriorityClass>();
        const waiting = new Set<number>();
        let inFlight = 0;
        let next = 0;
        const admit = (ts: readonly number[]): void => {
          for (const t of ts) {
            expect(waiting.delete(t)).toBe(true);
            // Nothing of a higher class was left waiting when this one went.
            const rank = priorityClasses.indexOf(classOf.get(t) ?? "standard");
            for (const w of waiting) expect(priorityClasses.indexOf(classOf.get(w) ?? "standard")).toBeGreaterThanOrEqual(rank);
            inFlight++;
          }
        };
        for (const o of ops) {
          if (o.t === "enter") {
            const t = next++;
            classOf.set(t, o.cls);
            const r = q.enter(t, o.cls, o.p, L);
            if (r.pushedOut !== undefined) expect(waiting.delete(r.pushedOut.ticket)).toBe(true);
            if (r.t === "admitted") inFlight++;
            else if (r.t === "queued") waiting.add(t);
          } else if (o.t === "leave") {
            if (inFlight === 0) continue;
            inFlight--;
            admit(q.leave(L));
          } else {
            const t = o.k % Math.max(1, next);
            expect(q.cancel(t)).toBe(waiting.delete(t));
          }
          expect(inFlight).toBeLessThanOrEqual(capacity);
          expect(q.inFlight).toBe(inFlight);
          expect(q.queued).toBe(waiting.size);
          expect(q.queued).toBeLessThanOrEqual(maxQueued);
          // Work is conserving: nothing waits while there is room.
          if (inFlight < capacity) expect(waiting.size).toBe(0);
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe("admission settings and call classes", () => {
  it("validates a model's admission block whole, naming the field", () => {
    expect(admissionSettings("m.admission", { maxInFlightPerReplica: 4 }, 4)).toEqual({ maxInFlightPerReplica: 4, shedAtQueued: 4, maxQueued: 512, maxQueuedPerPrincipal: 128, retryAfterMs: 1000 });
    expect(admissionSettings("m.admission", { maxInFlightPerReplica: 8, shedAtQueued: 16, maxQueued: 64, maxQueuedPerPrincipal: 8, retryAfter: "3s" }, 4)).toMatchObject({ retryAfterMs: 3000 });
    expect(() => admissionSettings("m.admission", { maxInFlightPerReplica: 2 }, 4)).toThrow(/m\.admission\.maxInFlightPerReplica: must be at least the model's replicas\.targetInFlight \(4\)/);
    expect(() => admissionSettings("m.admission", { maxInFlightPerReplica: 4, shedAtQueued: 600 }, 1)).toThrow(/m\.admission\.shedAtQueued: must be an integer from 0 to 512/);
    expect(() => admissionSettings("m.admission", { maxInFlightPerReplica: 4, nope: 1 }, 1)).toThrow(/m\.admission\.nope: unknown field/);
    expect(() => admissionSettings("m.admission", { maxInFlightPerReplica: 4, retryAfter: "11m" }, 1)).toThrow(/m\.admission\.retryAfter/);
    expect(() => admissionSettings("m.admission", 3, 1)).toThrow(/m\.admission: must be a mapping/);
  });

  it("capacity follows the replicas, one at least", () => {
    const s = admissionSettings("a", { maxInFlightPerReplica: 4 }, 1);
    expect(admissionLimits(s, 0).capacity).toBe(4);
    expect(admissionLimits(s, 3).capacity).toBe(12);
  });

  it("a call may ask for its token's class or lower, never higher", () => {
    expect(callClass("standard", undefined, "h")).toBe("standard");
    expect(callClass("standard", "sheddable", "h")).toBe("sheddable");
    expect(callClass("critical", "standard", "h")).toBe("standard");
    expect(() => callClass("standard", "critical", "x-warden-priority")).toThrow(/permission_denied\] x-warden-priority: this token may ask for standard or lower, not critical/);
    expect(() => callClass("standard", "urgent", "x-warden-priority")).toThrow(/invalid_argument\] x-warden-priority: must be one of critical, standard, sheddable/);
  });
});
