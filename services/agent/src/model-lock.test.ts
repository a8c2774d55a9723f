import { describe, expect, it } from "vitest";
import { Code, WardenError, isWardenError } from "@warden/common";
import { ModelLocks } from "./model-lock.js";

const never = new AbortController().signal;
const tick = () => new Promise((r) => setImmediate(r));

describe("per-model lock", () => {
  it("lets starts share it and makes a stop wait for all of them", async () => {
    const locks = new ModelLocks();
    const s1 = await locks.acquire("m", "shared", never);
    const s2 = await locks.acquire("m", "shared", never);
    let stopGot = false;
    const stop = locks.acquire("m", "exclusive", never).then((r) => {
      stopGot = true;
      return r;
    });
    await tick();
    expect(stopGot).toBe(false);
    s1();
    await tick();
    expect(stopGot).toBe(false);
    s2();
    (await stop)();
    expect(locks.size()).toBe(0);
  });

  it("serves waiters FIFO: a start behind a waiting stop waits too", async () => {
    const locks = new ModelLocks();
    const order: string[] = [];
    const s1 = await locks.acquire("m", "shared", never);
    const stop = locks.acquire("m", "exclusive", never).then((r) => {
      order.push("stop");
      return r;
    });
    const start = locks.acquire("m", "shared", never).then((r) => {
      order.push("start");
      return r;
    });
    await tick();
    expect(order).toEqual([]);
    s1();
    const release = await stop;
    await tick();
    expect(order).toEqual(["stop"]);
    release();
    (await start)();
    expect(order).toEqual(["stop", "start"]);
  });

  it("fails a stop at its deadline with the exact message, and a cancelled one with CANCELLED", async () => {
    const locks = new ModelLocks();
    const s = await locks.acquire("llama-8b", "shared", never);
    const dl = new AbortController();
    const p = locks.acquire("llama-8b", "exclusive", dl.signal).catch((e: unknown) => e);
    dl.abort(new WardenError(Code.DeadlineExceeded, "deadline"));
    const err = await p;
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    expect((err as WardenError).rawMessage).toBe('waiting to shut down model "llama-8b": context deadline exceeded');
    const cancel = new AbortController();
    const p2 = locks.acquire("llama-8b", "exclusive", cancel.signal).catch((e: unknown) => e);
    cancel.abort();
    expect(isWardenError(await p2, Code.Canceled)).toBe(true);
    // the abandoned waiters left the queue: another stop gets the lock once the start ends
    s();
    (await locks.acquire("llama-8b", "exclusive", never))();
    expect(locks.size()).toBe(0);
  });

  it("keeps models independent", async () => {
    const locks = new ModelLocks();
    const a = await locks.acquire("a", "exclusive", never);
    const b = await locks.acquire("b", "exclusive", never);
    a();
    b();
  });
});
