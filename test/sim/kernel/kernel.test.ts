import { describe, expect, it } from "vitest";
import { EventQueue } from "./event-queue.js";
import { SimRandom } from "./sim-random.js";
import { VirtualClock } from "./virtual-clock.js";
import { runUntil } from "./run-loop.js";

describe("simulation kernel", () => {
  it("pops events by time, ties in insertion order, skipping cancelled ones", () => {
    const q = new EventQueue();
    const order: string[] = [];
    q.push(5, "a", () => order.push("a"));
    q.push(1, "b", () => order.push("b"));
    const cancel = q.push(3, "c", () => order.push("c"));
    q.push(5, "d", () => order.push("d"));
    q.push(1, "e", () => order.push("e"));
    cancel();
    cancel();
    expect(q.size).toBe(4);
    for (let e = q.pop(); e !== undefined; e = q.pop()) e.fn();
    expect(order).toEqual(["b", "e", "a", "d"]);
  });

  it("keeps heap order over many random pushes", () => {
    const q = new EventQueue();
    const r = new SimRandom(7);
    for (let i = 0; i < 2_000; i++) q.push(r.int(0, 500), "x", () => {});
    let last = -1;
    for (let at = q.peekAtMs(); at !== undefined; at = q.peekAtMs()) {
      expect(at).toBeGreaterThanOrEqual(last);
      last = at;
      q.pop();
    }
  });

  it("the PRNG is a function of its seed, and forks are independent of each other", () => {
    const a = new SimRandom(42);
    const b = new SimRandom(42);
    const xs = Array.from({ length: 50 }, () => a.next());
    expect(Array.from({ length: 50 }, () => b.next())).toEqual(xs);
    expect(new SimRandom(43).next()).not.toBe(xs[0]);
    expect(new SimRandom(42).fork("x").next()).toBe(new SimRandom(42).fork("x").next());
    expect(new SimRandom(42).fork("x").next()).not.toBe(new SimRandom(42).fork("y").next());
    for (const v of xs) expect(v >= 0 && v < 1).toBe(true);
  });

  it("runs timers at their virtual time and drains promise chains before the next event", async () => {
    const q = new EventQueue();
    const clock = new VirtualClock(q);
    const seen: string[] = [];
    clock.setTimer(100, () => {
      void Promise.resolve()
        .then(() => Promise.resolve())
        .then(() => seen.push(`chain@${String(clock.now())}`));
    });
    clock.setTimer(101, () => seen.push(`timer@${String(clock.now())}`));
    await runUntil(q, clock, 1_000, { afterStep: () => {}, onThrow: () => {}, shouldStop: () => false }, { untilMs: 0 });
    expect(seen).toEqual(["chain@100", "timer@101"]);
    expect(clock.now()).toBe(1_000);
  });
});
