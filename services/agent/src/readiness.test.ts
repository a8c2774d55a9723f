import { describe, expect, it } from "vitest";
import { Code, ManualClock, WardenError, isWardenError } from "@warden/common";
import { waitReady } from "./readiness.js";

const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

describe("readiness", () => {
  it("polls fast during the first interval, then backs off, and gives up when the budget (attempts × interval) is spent", async () => {
    const clock = new ManualClock();
    const pollsAtMs: number[] = [];
    const p = waitReady({
      clock,
      readiness: { attempts: 3, intervalMs: 1_000, initialIntervalMs: 100 },
      signal: new AbortController().signal,
      portOpen: async () => {
        pollsAtMs.push(clock.now());
        return false;
      },
      health: async () => {},
    }).catch((e: unknown) => e);
    for (let t = 0; t < 40; t++) {
      await flush();
      clock.advance(100);
    }
    const err = await p;
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect((err as WardenError).rawMessage).toMatch(/^readiness: Health did not answer within 3000ms/);
    // every 100 ms during the first second, then 200, 400, 800 …
    expect(pollsAtMs.slice(0, 11)).toEqual([0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]);
    expect(pollsAtMs[11]).toBe(1200);
    expect(pollsAtMs[12]).toBe(1600);
    expect(Math.max(...pollsAtMs)).toBeLessThan(3000);
  });

  it("returns once Health answers, and stops at once when the signal aborts", async () => {
    const clock = new ManualClock();
    let calls = 0;
    await waitReady({
      clock,
      readiness: { attempts: 20, intervalMs: 2_000, initialIntervalMs: 50 },
      signal: new AbortController().signal,
      portOpen: async () => true,
      health: async () => {
        calls++;
      },
    });
    expect(calls).toBe(1);
    const ctl = new AbortController();
    const p = waitReady({ clock, readiness: { attempts: 20, intervalMs: 2_000, initialIntervalMs: 50 }, signal: ctl.signal, portOpen: async () => false, health: async () => {} }).catch((e: unknown) => e);
    await flush();
    ctl.abort(new WardenError(Code.Unavailable, "backend process exited"));
    expect(isWardenError(await p, Code.Unavailable)).toBe(true);
  });
});
