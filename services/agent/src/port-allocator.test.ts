import { describe, expect, it } from "vitest";
import { ManualClock } from "@warden/common";
import { PortAllocator } from "./port-allocator.js";

describe("port allocator", () => {
  it("never hands out a port twice, even to concurrent callers", async () => {
    const ports = new PortAllocator({ host: "127.0.0.1", min: 100, max: 102, quarantineMs: 0, clock: new ManualClock(), probe: async () => true });
    const got = await Promise.all([ports.allocate(), ports.allocate(), ports.allocate(), ports.allocate()]);
    expect(new Set(got.slice(0, 3))).toEqual(new Set([100, 101, 102]));
    expect(got[3]).toBeUndefined();
  });

  it("starts its search at startAt and wraps around the range; an out-of-range start means min", async () => {
    const ports = new PortAllocator({ host: "127.0.0.1", min: 100, max: 103, quarantineMs: 0, clock: new ManualClock(), probe: async () => true, startAt: 102 });
    expect([await ports.allocate(), await ports.allocate(), await ports.allocate(), await ports.allocate()]).toEqual([102, 103, 100, 101]);
    const bad = new PortAllocator({ host: "127.0.0.1", min: 100, max: 103, quarantineMs: 0, clock: new ManualClock(), probe: async () => true, startAt: 99 });
    expect(await bad.allocate()).toBe(100);
  });

  it("quarantines a released port on the injected clock", async () => {
    const clock = new ManualClock();
    const ports = new PortAllocator({ host: "127.0.0.1", min: 100, max: 100, quarantineMs: 30_000, clock, probe: async () => true });
    expect(await ports.allocate()).toBe(100);
    ports.release(100);
    expect(await ports.allocate()).toBeUndefined();
    clock.advance(29_999);
    expect(await ports.allocate()).toBeUndefined();
    clock.advance(1);
    expect(await ports.allocate()).toBe(100);
  });

  it("skips ports someone else holds, and claimed (adopted) ports", async () => {
    const ports = new PortAllocator({ host: "127.0.0.1", min: 100, max: 102, quarantineMs: 0, clock: new ManualClock(), probe: async (_h, p) => p !== 100 });
    ports.claim(101);
    expect(await ports.allocate()).toBe(102);
    expect(await ports.allocate()).toBeUndefined();
  });

  it("skips a blocked port (a foreign listener on another address) even when the probe passes", async () => {
    const blocked = new Set([100]);
    const ports = new PortAllocator({ host: "127.0.0.1", min: 100, max: 101, quarantineMs: 0, clock: new ManualClock(), probe: async () => true, blocked: (p) => blocked.has(p) });
    expect(await ports.allocate()).toBe(101);
    expect(await ports.allocate()).toBeUndefined();
    blocked.clear();
    expect(await ports.allocate()).toBe(100);
  });
});
