import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  Code,
  ManualClock,
  WardenError,
  backoffDelayMs,
  codeName,
  createUlidFactory,
  deadlineSignal,
  durationMsFromUint64,
  formatDurationMs,
  isUlid,
  isWardenError,
  leftoverBackoff,
  maxDurationMs,
  parseDurationMs,
  seededRng,
  sleep,
  ulidTimeMs,
} from "./index.js";

describe("WardenError", () => {
  it("prefixes the message with the code name and keeps the raw message and details", () => {
    const e = new WardenError(Code.FailedPrecondition, "model busy", { details: { model: "m" } });
    expect(e.message).toBe("[failed_precondition] model busy");
    expect(e.rawMessage).toBe("model busy");
    expect(e.details).toEqual({ model: "m" });
    expect(codeName(Code.DeadlineExceeded)).toBe("deadline_exceeded");
  });

  it("normalises AbortError to CANCELLED, a WardenError abort reason to itself, and anything else to the fallback", () => {
    const reason = new WardenError(Code.DeadlineExceeded, "late");
    const ctl = new AbortController();
    ctl.abort(reason);
    expect(WardenError.from(reason)).toBe(reason);
    const abortErr = Object.assign(new Error("aborted"), { name: "AbortError" });
    expect(WardenError.from(abortErr).code).toBe(Code.Canceled);
    expect(WardenError.from(new Error("x"), Code.Internal).code).toBe(Code.Internal);
    expect(WardenError.from("plain").code).toBe(Code.Unknown);
    expect(isWardenError(reason, Code.DeadlineExceeded)).toBe(true);
    expect(isWardenError(reason, Code.NotFound)).toBe(false);
  });
});

describe("duration maxima", () => {
  it("parseDurationMs refuses a duration above its maximum (default 30 days), naming the field", () => {
    expect(parseDurationMs("30d", "f")).toBe(maxDurationMs);
    for (const over of ["31d", "720h1ms", String(maxDurationMs + 1), maxDurationMs + 1, "99999999999999999999d"]) {
      expect(() => parseDurationMs(over, "policy.idleTimeout")).toThrow(/^\[invalid_argument\] policy\.idleTimeout: /);
    }
    expect(parseDurationMs("1h", "f", 3_600_000)).toBe(3_600_000);
    expect(() => parseDurationMs("61m", "tick", 3_600_000)).toThrow(/tick: duration must be at most 1h/);
  });

  it("durationMsFromUint64 checks the bigint before converting it (2^64-1 is refused, not rounded)", () => {
    expect(durationMsFromUint64(900_000n, "idle_timeout_ms", maxDurationMs)).toBe(900_000);
    expect(durationMsFromUint64(BigInt(maxDurationMs), "x", maxDurationMs)).toBe(maxDurationMs);
    const e = (() => {
      try {
        durationMsFromUint64(2n ** 64n - 1n, "patch.idle_timeout_ms", maxDurationMs, 1);
      } catch (err) {
        return err as WardenError;
      }
      return undefined;
    })();
    expect(e?.code).toBe(Code.InvalidArgument);
    expect(e?.rawMessage).toMatch(/^patch\.idle_timeout_ms: .*18446744073709551615/);
    expect(e?.details).toMatchObject({ field: "patch.idle_timeout_ms" });
    expect(() => durationMsFromUint64(0n, "x", 10, 1)).toThrow(/x: must be in \[1, 10\]/);
  });
});

describe("durations", () => {
  it("parses units and combinations", () => {
    expect(parseDurationMs("500ms", "f")).toBe(500);
    expect(parseDurationMs("30s", "f")).toBe(30_000);
    expect(parseDurationMs("15m", "f")).toBe(900_000);
    expect(parseDurationMs("1h30m", "f")).toBe(5_400_000);
    expect(parseDurationMs("2.5s", "f")).toBe(2_500);
    expect(parseDurationMs("250", "f")).toBe(250);
    expect(parseDurationMs(42, "f")).toBe(42);
  });

  it("rejects negative, NaN, empty and unknown units with INVALID_ARGUMENT naming the field", () => {
    for (const bad of ["-5m", "", "5 parsecs", "m", "1x", Number.NaN, -1, Number.POSITIVE_INFINITY]) {
      let err: unknown;
      try {
        parseDurationMs(bad, "policy.idleTimeout");
      } catch (e) {
        err = e;
      }
      expect(isWardenError(err, Code.InvalidArgument), String(bad)).toBe(true);
      expect((err as WardenError).rawMessage.startsWith("policy.idleTimeout:")).toBe(true);
    }
  });

  it("formatting round-trips through parsing for whole seconds", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10_000_000 }), (s) => {
        expect(parseDurationMs(formatDurationMs(s * 1000), "f", Number.POSITIVE_INFINITY)).toBe(s * 1000);
      }),
    );
  });
});

describe("ULIDs", () => {
  it("are canonical, carry the clock's time, and sort in creation order within one millisecond", () => {
    const clock = new ManualClock(0, 1_800_000_000_000);
    const next = createUlidFactory(clock, seededRng(7));
    const ids = Array.from({ length: 1000 }, () => next());
    for (const id of ids) expect(isUlid(id)).toBe(true);
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ulidTimeMs(ids[0]!)).toBe(1_800_000_000_000);
    clock.advance(5);
    expect(ulidTimeMs(next())).toBe(1_800_000_000_005);
    expect(isUlid("not-a-ulid")).toBe(false);
    expect(isUlid("01m8kwfp0y9et475gs9nka0jk8")).toBe(false);
  });

  it("the same seed and clock give the same ids", () => {
    const a = createUlidFactory(new ManualClock(), seededRng(1));
    const b = createUlidFactory(new ManualClock(), seededRng(1));
    expect([a(), a(), a()]).toEqual([b(), b(), b()]);
  });
});

describe("ManualClock", () => {
  it("fires timers in due order (ties in creation order) only when advanced, and cancel removes them", () => {
    const c = new ManualClock();
    const fired: string[] = [];
    c.setTimer(20, () => fired.push("b"));
    c.setTimer(10, () => fired.push("a1"));
    c.setTimer(10, () => fired.push("a2"));
    const cancel = c.setTimer(15, () => fired.push("x"));
    cancel();
    c.advance(9);
    expect(fired).toEqual([]);
    c.advance(11);
    expect(fired).toEqual(["a1", "a2", "b"]);
    expect(c.now()).toBe(20);
    expect(c.pendingTimers()).toBe(0);
  });

  it("timers set by a firing timer fire in the same advance when due", () => {
    const c = new ManualClock();
    const at: number[] = [];
    c.setTimer(5, () => c.setTimer(5, () => at.push(c.now())));
    c.advance(20);
    expect(at).toEqual([10]);
  });

  it("sleep and deadlineSignal run on the injected clock", async () => {
    const c = new ManualClock();
    let woke = false;
    const p = sleep(c, 100).then(() => (woke = true));
    c.advance(99);
    await Promise.resolve();
    expect(woke).toBe(false);
    c.advance(1);
    await p;
    expect(woke).toBe(true);
    const d = deadlineSignal(c, 50, "op");
    c.advance(50);
    expect(d.signal.aborted).toBe(true);
    expect((d.signal.reason as WardenError).code).toBe(Code.DeadlineExceeded);
    d.cleanup();
  });
});

describe("backoff", () => {
  it("grows by the factor, caps, and jitters within ±20 %", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 40 }), fc.integer(), (attempt, seed) => {
        const d = backoffDelayMs(leftoverBackoff, attempt, seededRng(seed));
        const base = Math.min(60_000, 1_000 * Math.pow(1.6, attempt));
        expect(d).toBeGreaterThanOrEqual(Math.floor(base * 0.8));
        expect(d).toBeLessThanOrEqual(Math.ceil(base * 1.2));
      }),
    );
  });
});
