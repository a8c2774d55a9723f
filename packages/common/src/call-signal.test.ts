import { describe, expect, it } from "vitest";
import { CallSignal } from "./call-signal.js";

describe("CallSignal", () => {
  it("runs each listener once, in the order added, at the first abort; a removed one never; a later abort changes nothing", () => {
    const s = new CallSignal();
    const ran: string[] = [];
    const a = (): void => void ran.push("a");
    const b = (): void => void ran.push("b");
    const c = (): void => void ran.push("c");
    s.addEventListener("abort", a);
    s.addEventListener("abort", b);
    s.addEventListener("abort", a); // the same listener twice is one listener, as on an AbortSignal
    s.addEventListener("abort", c);
    s.removeEventListener("abort", b);
    expect(s.aborted).toBe(false);
    const why = new Error("first");
    s.abort(why);
    s.abort(new Error("second"));
    expect(ran).toEqual(["a", "c"]);
    expect(s.aborted).toBe(true);
    expect(s.reason).toBe(why);
    s.addEventListener("abort", a); // after the abort: never runs, as on an aborted AbortSignal
    s.abort(why);
    expect(ran).toEqual(["a", "c"]);
  });

  it("a listener that throws does not stop the others or the abort; its error is reported as uncaught", async () => {
    const s = new CallSignal();
    const ran: string[] = [];
    const boom = new Error("listener bug");
    const uncaught: unknown[] = [];
    const onUncaught = (e: unknown): void => void uncaught.push(e);
    process.prependListener("uncaughtException", onUncaught);
    try {
      s.addEventListener("abort", () => {
        throw boom;
      });
      s.addEventListener("abort", () => void ran.push("second"));
      const signal = s.signal;
      s.abort(new Error("why"));
      expect(ran).toEqual(["second"]);
      expect(signal.aborted).toBe(true);
      await new Promise((r) => setImmediate(r));
      expect(uncaught).toEqual([boom]);
    } finally {
      process.removeListener("uncaughtException", onUncaught);
    }
  });

  it("gives an AbortSignal of the same cancellation: made before the abort it fires with the reason, made after it is already aborted", () => {
    const early = new CallSignal();
    const signal = early.signal;
    expect(early.signal).toBe(signal);
    let firedWith: unknown;
    signal.addEventListener("abort", () => {
      firedWith = signal.reason as unknown;
    });
    const why = new Error("cancelled");
    early.abort(why);
    expect(signal.aborted).toBe(true);
    expect(firedWith).toBe(why);

    const late = new CallSignal();
    late.abort(why);
    expect(late.signal.aborted).toBe(true);
    expect(late.signal.reason).toBe(why);
  });
});
