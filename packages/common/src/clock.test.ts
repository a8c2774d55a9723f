import { describe, expect, it } from "vitest";
import { ManualClock, armTimer, maxTimerChunkMs, systemClock, type TimerHost } from "./clock.js";

const overLimitMs = 2 ** 31; // one past setTimeout's 2^31-1 ms

/** A hand-driven TimerHost: records each armed delay; `fire` runs the oldest pending timer after moving time by its delay. */
function fakeHost(): TimerHost & { armed: number[]; pending(): number; fire(skewMs?: number): void; nowMs: number } {
  const timers: { fn: () => void; delayMs: number; handle: number }[] = [];
  let next = 0;
  const host = {
    nowMs: 0,
    armed: [] as number[],
    now: () => host.nowMs,
    setTimeout(fn: () => void, delayMs: number): unknown {
      host.armed.push(delayMs);
      const handle = next++;
      timers.push({ fn, delayMs, handle });
      return handle;
    },
    clearTimeout(handle: unknown): void {
      const i = timers.findIndex((t) => t.handle === handle);
      if (i >= 0) timers.splice(i, 1);
    },
    pending: () => timers.length,
    /** Runs the oldest timer; `skewMs` < 0 is a host clock that reads less than the timer waited. */
    fire(skewMs = 0): void {
      const t = timers.shift();
      if (t === undefined) throw new Error("no timer pending");
      host.nowMs += t.delayMs + skewMs;
      t.fn();
    },
  };
  return host;
}

describe("long timers (> 2^31-1 ms)", () => {
  it("systemClock: a 2^31 ms timer has not fired after a real wait (setTimeout alone fires it after 1 ms), and cancelling it works", async () => {
    let fired = false;
    const cancel = systemClock.setTimer(overLimitMs, () => {
      fired = true;
    });
    // Node orders timers by due time: an overflowed (1 ms) timer armed first would run before this one.
    await new Promise((r) => setTimeout(r, 30));
    expect(fired).toBe(false);
    cancel();
    cancel();
  });

  it("armTimer arms chunks of at most 2^31-1 ms and re-arms with what is left until the due time", () => {
    const host = fakeHost();
    let fired = 0;
    const total = 3 * maxTimerChunkMs + 1234;
    armTimer(host, total, () => {
      fired++;
    });
    expect(host.armed).toEqual([maxTimerChunkMs]);
    host.fire();
    host.fire();
    host.fire();
    expect(fired).toBe(0);
    expect(host.armed).toEqual([maxTimerChunkMs, maxTimerChunkMs, maxTimerChunkMs, 1234]);
    host.fire();
    expect(fired).toBe(1);
    expect(host.nowMs).toBe(total);
    expect(host.pending()).toBe(0);
  });

  it("armTimer: a chunk that ends early by the host's clock is re-armed for the rest; a plain timer is never re-armed", () => {
    const host = fakeHost();
    let fired = 0;
    armTimer(host, maxTimerChunkMs + 10, () => {
      fired++;
    });
    host.fire(-5); // the chunk ends, but the host's clock reads 5 ms short of it
    expect(host.armed).toEqual([maxTimerChunkMs, 15]);
    expect(fired).toBe(0);
    host.fire();
    expect(fired).toBe(1);
    armTimer(host, 100, () => {
      fired++;
    });
    host.fire(-50); // "early" by the host's clock: a plain timer still fires, no re-arm
    expect(fired).toBe(2);
    expect(host.armed).toEqual([maxTimerChunkMs, 15, 100]);
  });

  it("armTimer: cancel between chunks stops the re-arming", () => {
    const host = fakeHost();
    let fired = false;
    const cancel = armTimer(host, 2 * maxTimerChunkMs + 1, () => {
      fired = true;
    });
    host.fire();
    expect(host.pending()).toBe(1);
    cancel();
    expect(host.pending()).toBe(0);
    expect(fired).toBe(false);
  });

  it("ManualClock fires a 2^31 ms timer exactly at its due time, like systemClock", () => {
    const c = new ManualClock();
    let firedAt: number | undefined;
    c.setTimer(overLimitMs, () => {
      firedAt = c.now();
    });
    c.advance(overLimitMs - 1);
    expect(firedAt).toBeUndefined();
    c.advance(1);
    expect(firedAt).toBe(overLimitMs);
  });

  it("both clocks: Infinity never fires, NaN is a RangeError, a negative delay is 0", async () => {
    const c = new ManualClock();
    let n = 0;
    c.setTimer(Number.POSITIVE_INFINITY, () => n++);
    c.advance(10 * overLimitMs);
    expect(n).toBe(0);
    expect(() => c.setTimer(Number.NaN, () => n++)).toThrow(RangeError);
    expect(() => systemClock.setTimer(Number.NaN, () => n++)).toThrow(RangeError);
    c.setTimer(-5, () => n++);
    c.advance(0);
    expect(n).toBe(1);
    let inf = false;
    systemClock.setTimer(Number.POSITIVE_INFINITY, () => (inf = true));
    await new Promise<void>((resolve) => systemClock.setTimer(-5, resolve));
    await new Promise((r) => setTimeout(r, 20));
    expect(inf).toBe(false);
  });
});
