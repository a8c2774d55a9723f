import { PassThrough } from "node:stream";
import type { ServerDuplexStream } from "@grpc/grpc-js";
import { describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { UndecodableRequest } from "./request-decode.js";
import { RequestIterator } from "./request-iterator.js";

/** An object-mode stream standing in for a grpc-js call's request side (the events RequestIterator reads). */
function call(): PassThrough & ServerDuplexStream<unknown, unknown> {
  return new PassThrough({ objectMode: true }) as PassThrough & ServerDuplexStream<unknown, unknown>;
}

describe("RequestIterator", () => {
  it("gives the requests in order, whether they came before or after the ask, then the end", async () => {
    const c = call();
    const it = new RequestIterator(c, () => undefined);
    c.write("a");
    c.write("b");
    expect(await it.next()).toEqual({ done: false, value: "a" });
    expect(await it.next()).toEqual({ done: false, value: "b" });
    const waiting = it.next();
    c.write("c");
    expect(await waiting).toEqual({ done: false, value: "c" });
    const last = it.next();
    c.end();
    expect(await last).toEqual({ done: true, value: undefined });
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });

  it("pauses the call once 16 requests wait unread, and reads on once they are taken", async () => {
    const c = call();
    const it = new RequestIterator(c, () => undefined);
    for (let i = 0; i < 20; i++) c.write(i);
    await new Promise((r) => setImmediate(r));
    expect(c.isPaused()).toBe(true);
    const got: unknown[] = [];
    for (let i = 0; i < 20; i++) got.push((await it.next()).value);
    expect(got).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(c.isPaused()).toBe(false);
  });

  it("an undecodable request is reported and thrown, in its place", async () => {
    const c = call();
    const reported: WardenError[] = [];
    const it = new RequestIterator(c, (e) => reported.push(e));
    const bad = new UndecodableRequest(new WardenError(Code.InvalidArgument, "bad bytes"));
    c.write("a");
    c.write(bad);
    expect(await it.next()).toEqual({ done: false, value: "a" });
    await expect(it.next()).rejects.toBe(bad.error);
    const waiting = it.next();
    c.write(bad);
    await expect(waiting).rejects.toBe(bad.error);
    expect(reported).toEqual([bad.error, bad.error]);
  });

  it("an error, or a close before the end, fails the waiting ask and every later one", async () => {
    const c = call();
    const it = new RequestIterator(c, () => undefined);
    const waiting = it.next();
    c.destroy(new Error("reset"));
    await expect(waiting).rejects.toThrow("reset");
    await expect(it.next()).rejects.toThrow("reset");

    const d = call();
    const jt = new RequestIterator(d, () => undefined);
    const w = jt.next();
    d.destroy();
    await expect(w).rejects.toMatchObject({ code: Code.Canceled });
  });

  it("return() stops reading and leaves the call open; the waiting ask ends", async () => {
    const c = call();
    const it = new RequestIterator(c, () => undefined);
    const waiting = it.next();
    expect(await it.return()).toEqual({ done: true, value: undefined });
    expect(await waiting).toEqual({ done: true, value: undefined });
    expect(c.destroyed).toBe(false);
    expect(c.listenerCount("data")).toBe(0);
    c.write("unread");
    expect(await it.next()).toEqual({ done: true, value: undefined });
  });
});
