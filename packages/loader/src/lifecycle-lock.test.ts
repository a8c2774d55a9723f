import { Code, WardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { LockTable } from "./lifecycle-lock.js";
import { flush } from "./test-fakes.js";

/** Tracks whether a lock request has been granted yet. */
function request(p: Promise<() => void>): { granted: () => boolean; release: () => void; rejected: () => unknown } {
  let release: (() => void) | undefined;
  let err: unknown;
  p.then(
    (r) => {
      release = r;
    },
    (e: unknown) => {
      err = e;
    },
  );
  return {
    granted: () => release !== undefined,
    release: () => {
      if (release === undefined) throw new Error("not granted");
      release();
    },
    rejected: () => err,
  };
}

describe("LockTable", () => {
  it("sharedFree says whether tryShared would grant, and leaves no entry behind", async () => {
    const t = new LockTable();
    expect(t.sharedFree("k")).toBe(true);
    expect(t.size).toBe(0);
    const load = request(t.shared("k"));
    await flush();
    expect(t.sharedFree("k")).toBe(true);
    const stop = request(t.exclusive("k"));
    await flush();
    // A stop waiting behind the load: a lookup must not slip in before it.
    expect([stop.granted(), t.sharedFree("k"), t.tryShared("k")]).toEqual([false, false, undefined]);
    load.release();
    await flush();
    expect([stop.granted(), t.sharedFree("k")]).toEqual([true, false]);
    stop.release();
    expect(t.sharedFree("k")).toBe(true);
    expect(t.size).toBe(0);
  });

  it("grants shared holders of one key concurrently", async () => {
    const t = new LockTable();
    const a = request(t.shared("m"));
    const b = request(t.shared("m"));
    await flush();
    expect(a.granted() && b.granted()).toBe(true);
    expect(t.isSharedHeld("m")).toBe(true);
    a.release();
    b.release();
    expect(t.isHeld("m")).toBe(false);
    expect(t.size).toBe(0);
  });

  it("an exclusive request waits until every shared holder released", async () => {
    const t = new LockTable();
    const s1 = request(t.shared("m"));
    const s2 = request(t.shared("m"));
    const x = request(t.exclusive("m"));
    await flush();
    expect(x.granted()).toBe(false);
    s1.release();
    await flush();
    expect(x.granted()).toBe(false);
    s2.release();
    await flush();
    expect(x.granted()).toBe(true);
    expect(t.isSharedHeld("m")).toBe(false);
    x.release();
    expect(t.size).toBe(0);
  });

  it("keys are independent: an exclusive on one model never blocks another", async () => {
    const t = new LockTable();
    const x = request(t.exclusive("a"));
    const s = request(t.shared("b"));
    await flush();
    expect(x.granted() && s.granted()).toBe(true);
    x.release();
    s.release();
    expect(t.size).toBe(0);
  });

  it("is FIFO: a queued exclusive blocks shared requests that arrive after it", async () => {
    const t = new LockTable();
    const s1 = request(t.shared("m"));
    const x = request(t.exclusive("m"));
    const s2 = request(t.shared("m"));
    await flush();
    expect(s1.granted()).toBe(true);
    expect(x.granted()).toBe(false);
    expect(s2.granted()).toBe(false);
    s1.release();
    await flush();
    expect(x.granted()).toBe(true);
    expect(s2.granted()).toBe(false);
    x.release();
    await flush();
    expect(s2.granted()).toBe(true);
    s2.release();
    expect(t.size).toBe(0);
  });

  it("a waiter that aborts is removed, rejects with the abort reason, and unblocks those queued behind it", async () => {
    const t = new LockTable();
    const s1 = request(t.shared("m"));
    const ctl = new AbortController();
    const x = request(t.exclusive("m", ctl.signal));
    const s2 = request(t.shared("m"));
    await flush();
    expect(s2.granted()).toBe(false);
    ctl.abort(new WardenError(Code.DeadlineExceeded, "stop deadline"));
    await flush();
    expect(x.granted()).toBe(false);
    expect(x.rejected()).toBeInstanceOf(WardenError);
    expect((x.rejected() as WardenError).code).toBe(Code.DeadlineExceeded);
    // the shared request behind the departed exclusive joins the shared holder
    expect(s2.granted()).toBe(true);
    s1.release();
    s2.release();
    expect(t.size).toBe(0);
  });

  it("the table shrinks to 0 entries when the only waiter gives up and the holder leaves", async () => {
    const t = new LockTable();
    const x1 = request(t.exclusive("m"));
    const ctl = new AbortController();
    const x2 = request(t.exclusive("m", ctl.signal));
    await flush();
    expect(t.size).toBe(1);
    ctl.abort();
    await flush();
    expect(x2.rejected()).toBeInstanceOf(WardenError);
    expect(t.size).toBe(1);
    x1.release();
    expect(t.size).toBe(0);
    expect(t.isHeld("m")).toBe(false);
  });

  it("an already-aborted signal rejects at once and creates no entry", async () => {
    const t = new LockTable();
    const ctl = new AbortController();
    ctl.abort();
    await expect(t.shared("m", ctl.signal)).rejects.toBeInstanceOf(WardenError);
    expect(t.size).toBe(0);
  });

  it("releasing twice is harmless: the second release does not free another holder's share", async () => {
    const t = new LockTable();
    const a = request(t.shared("m"));
    const b = request(t.shared("m"));
    await flush();
    a.release();
    a.release();
    const x = request(t.exclusive("m"));
    await flush();
    expect(x.granted()).toBe(false);
    b.release();
    await flush();
    expect(x.granted()).toBe(true);
    x.release();
    expect(t.size).toBe(0);
  });
});
