import { describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { WatchHub } from "./watch-hub.js";

describe("watch hub", () => {
  it("delivers events published after subscribing, in order, to every watcher", async () => {
    const hub = new WatchHub<number>();
    const ctl = new AbortController();
    const a: number[] = [];
    const b: number[] = [];
    const ra = (async () => { for await (const e of hub.subscribe(ctl.signal)) a.push(e); })();
    const rb = (async () => { for await (const e of hub.subscribe(ctl.signal)) b.push(e); })();
    await new Promise((r) => setImmediate(r));
    hub.publish(1);
    hub.publish(2);
    await new Promise((r) => setImmediate(r));
    ctl.abort();
    await Promise.all([ra, rb]);
    expect(a).toEqual([1, 2]);
    expect(b).toEqual([1, 2]);
    expect(hub.watcherCount()).toBe(0);
  });

  it("ends a watcher that falls too far behind with RESOURCE_EXHAUSTED instead of growing", async () => {
    const hub = new WatchHub<number>(3);
    const it = hub.subscribe(new AbortController().signal)[Symbol.asyncIterator]();
    const first = it.next();
    await new Promise((r) => setImmediate(r));
    for (let i = 0; i < 10; i++) hub.publish(i);
    expect((await first).value).toBe(0);
    const got: number[] = [];
    const err = await (async () => {
      for (;;) {
        const n = await it.next();
        if (n.done === true) return undefined;
        got.push(n.value);
      }
    })().catch((e: unknown) => e);
    expect(got.length).toBeLessThanOrEqual(3);
    expect(isWardenError(err, Code.ResourceExhausted)).toBe(true);
  });
});
