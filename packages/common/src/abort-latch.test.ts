import { describe, expect, it } from "vitest";
import { AbortLatch } from "./signals.js";
import { Code, WardenError } from "./errors.js";

/** An EventTarget-backed signal that counts the abort listeners it holds. */
function countingSignal(): { ctl: AbortController; listeners: () => number } {
  const ctl = new AbortController();
  let n = 0;
  const add = ctl.signal.addEventListener.bind(ctl.signal);
  const remove = ctl.signal.removeEventListener.bind(ctl.signal);
  ctl.signal.addEventListener = (...args: Parameters<AbortSignal["addEventListener"]>) => {
    if (args[0] === "abort") n++;
    add(...args);
  };
  ctl.signal.removeEventListener = (...args: Parameters<AbortSignal["removeEventListener"]>) => {
    if (args[0] === "abort") n--;
    remove(...args);
  };
  return { ctl, listeners: () => n };
}

describe("AbortLatch", () => {
  it("settles each wait as its work does, with one listener for all of them, removed by close", async () => {
    const { ctl, listeners } = countingSignal();
    const latch = new AbortLatch(ctl.signal);
    for (let i = 0; i < 100; i++) expect(await latch.race(Promise.resolve(i))).toBe(i);
    const gone = new WardenError(Code.NotFound, "gone");
    await expect(latch.race(Promise.reject(gone))).rejects.toBe(gone);
    expect(listeners()).toBe(1);
    latch.close();
    expect(listeners()).toBe(0);
  });

  it("rejects the wait in progress with the signal's reason when it aborts, and every later wait at once", async () => {
    const ctl = new AbortController();
    const latch = new AbortLatch(ctl.signal);
    expect(await latch.race(Promise.resolve("first"))).toBe("first");
    const never = new Promise<string>(() => undefined);
    const waiting = latch.race(never);
    const revoked = new WardenError(Code.Unauthenticated, "token revoked");
    ctl.abort(revoked);
    await expect(waiting).rejects.toBe(revoked);
    await expect(latch.race(Promise.resolve("late"))).rejects.toMatchObject({ code: Code.Unauthenticated });
  });

  it("turns an abort reason that is not a WardenError into CANCELLED, and a non-Error rejection into a WardenError", async () => {
    const ctl = new AbortController();
    const latch = new AbortLatch(ctl.signal);
    const waiting = latch.race(new Promise<never>(() => undefined));
    ctl.abort("bye");
    await expect(waiting).rejects.toMatchObject({ code: Code.Canceled });
    const other = new AbortLatch(new AbortController().signal);
    // What a foreign library might reject with: not an Error.
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    const err: unknown = await other.race(Promise.reject("plain")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WardenError);
  });

  it("without a signal is the work itself", async () => {
    const latch = new AbortLatch(undefined);
    const p = Promise.resolve(7);
    expect(latch.race(p)).toBe(p);
    latch.close();
  });
});
