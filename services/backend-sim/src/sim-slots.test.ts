import { describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { SimSlots } from "./sim-slots.js";

const never = new AbortController().signal;
const flush = () => new Promise((r) => setImmediate(r));

describe("backend-sim slots (knob parallel)", () => {
  it("serves at most the limit at once; the rest wait and are served in arrival order", async () => {
    const slots = new SimSlots(() => 2);
    const order: string[] = [];
    const a = await slots.take(never);
    const b = await slots.take(never);
    const c = slots.take(never).then((r) => (order.push("c"), r));
    const d = slots.take(never).then((r) => (order.push("d"), r));
    await flush();
    expect([slots.inUse, slots.queued, order]).toEqual([2, 2, []]);
    a();
    a(); // idempotent: a second release frees nothing more
    await flush();
    expect([slots.inUse, slots.queued, order]).toEqual([2, 1, ["c"]]);
    // a newcomer does not overtake the one still waiting
    const e = slots.take(never).then((r) => (order.push("e"), r));
    b();
    await flush();
    expect(order).toEqual(["c", "d"]);
    (await c)();
    await flush();
    expect(order).toEqual(["c", "d", "e"]);
    (await d)();
    (await e)();
    expect([slots.inUse, slots.queued]).toEqual([0, 0]);
  });

  it("a waiter whose signal aborts leaves the queue without a slot", async () => {
    const slots = new SimSlots(() => 1);
    const a = await slots.take(never);
    const ac = new AbortController();
    const waiting = slots.take(ac.signal).catch((err: unknown) => err);
    await flush();
    expect(slots.queued).toBe(1);
    ac.abort();
    expect(isWardenError(await waiting, Code.Canceled) || isWardenError(await waiting, Code.DeadlineExceeded)).toBe(true);
    expect(slots.queued).toBe(0);
    a();
    expect(slots.inUse).toBe(0);
    await expect(slots.take(AbortSignal.abort())).rejects.toThrow();
  });

  it("0 is unlimited, and the limit is read live (LoadModel options may change it)", async () => {
    let limit = 0;
    const slots = new SimSlots(() => limit);
    const held = await Promise.all(Array.from({ length: 50 }, () => slots.take(never)));
    expect(slots.inUse).toBe(50);
    limit = 49;
    const next = slots.take(never);
    await flush();
    expect(slots.queued).toBe(1);
    held[0]?.();
    await flush();
    expect(slots.queued).toBe(1); // 49 still in use: at the limit
    held[1]?.();
    (await next)();
    expect(slots.inUse).toBe(48);
  });
});
