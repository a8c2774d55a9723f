import { describe, expect, it } from "vitest";
import { SingleFlight } from "./single-flight.js";

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: Error) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe("SingleFlight", () => {
  it("runs the work once for every waiter of a key, and again after it finished", async () => {
    const f = new SingleFlight<string, number>();
    let runs = 0;
    const gate = deferred<string>();
    const work = async (): Promise<string> => {
      runs++;
      return gate.promise;
    };
    const a = f.run("k", new AbortController().signal, work);
    const b = f.run("k", new AbortController().signal, work);
    expect(f.waiters("k")).toBe(2);
    gate.resolve("done");
    expect(await Promise.all([a, b])).toEqual(["done", "done"]);
    expect(runs).toBe(1);
    await Promise.resolve();
    expect(f.size()).toBe(0);
    expect(await f.run("k", new AbortController().signal, async () => { runs++; return "again"; })).toBe("again");
    expect(runs).toBe(2);
  });

  it("a waiter that aborts leaves at once; the work goes on for the others", async () => {
    const f = new SingleFlight<string, number>();
    const gate = deferred<string>();
    let workSignal: AbortSignal | undefined;
    const work = async (s: AbortSignal): Promise<string> => {
      workSignal = s;
      return gate.promise;
    };
    const quitter = new AbortController();
    const a = f.run("k", quitter.signal, work);
    const b = f.run("k", new AbortController().signal, work);
    quitter.abort(new Error("caller gone"));
    await expect(a).rejects.toThrow("caller gone");
    expect(f.waiters("k")).toBe(1);
    await Promise.resolve();
    expect(workSignal?.aborted).toBe(false);
    gate.resolve("bytes");
    expect(await b).toBe("bytes");
  });

  it("the work is aborted when the last waiter leaves, and the next run waits until it settled", async () => {
    const f = new SingleFlight<string, number>();
    const first = deferred<string>();
    const order: string[] = [];
    let firstSignal: AbortSignal | undefined;
    const c1 = new AbortController();
    const c2 = new AbortController();
    const a = f.run("k", c1.signal, async (s) => {
      firstSignal = s;
      order.push("first started");
      return first.promise;
    });
    const b = f.run("k", c2.signal, async () => "never");
    await Promise.resolve();
    await Promise.resolve();
    c1.abort(new Error("one"));
    expect(firstSignal?.aborted).toBe(false);
    c2.abort(new Error("two"));
    expect(firstSignal?.aborted).toBe(true);
    await expect(a).rejects.toThrow("one");
    await expect(b).rejects.toThrow("two");
    // A new caller while the abandoned run still cleans up: its run starts only after that one settled.
    const c = f.run("k", new AbortController().signal, async () => {
      order.push("second started");
      return "fresh";
    });
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(["first started"]);
    first.reject(new Error("aborted"));
    expect(await c).toBe("fresh");
    expect(order).toEqual(["first started", "second started"]);
  });

  it("progress reaches every waiter, a late one gets the last report first; failures reach all", async () => {
    const f = new SingleFlight<string, number>();
    const gate = deferred<string>();
    let report: ((p: number) => void) | undefined;
    const seenA: number[] = [];
    const seenB: number[] = [];
    const a = f.run("k", new AbortController().signal, async (_s, r) => {
      report = r;
      return gate.promise;
    }, (p) => seenA.push(p));
    await Promise.resolve();
    await Promise.resolve();
    report?.(10);
    const b = f.run("k", new AbortController().signal, async () => "x", (p) => seenB.push(p));
    report?.(20);
    gate.reject(new Error("digest mismatch"));
    await expect(a).rejects.toThrow("digest mismatch");
    await expect(b).rejects.toThrow("digest mismatch");
    expect(seenA).toEqual([10, 20]);
    expect(seenB).toEqual([10, 20]);
  });

  it("an already aborted signal never joins", async () => {
    const f = new SingleFlight<string, number>();
    const c = new AbortController();
    c.abort(new Error("before"));
    let ran = false;
    await expect(f.run("k", c.signal, async () => { ran = true; return ""; })).rejects.toThrow("before");
    expect(ran).toBe(false);
    expect(f.size()).toBe(0);
  });
});
