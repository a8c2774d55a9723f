import { describe, expect, it } from "vitest";
import { ReplayableRequests, replayMaxMessages } from "./replayable-requests.js";

/** A caller's request stream that yields `n` one-byte messages as the test releases them. */
function source(n: number) {
  const waiting: (() => void)[] = [];
  let pulls = 0;
  return {
    pulls: () => pulls,
    release: () => waiting.shift()?.(),
    iterable: (async function* () {
      for (let i = 0; i < n; i++) {
        pulls++;
        await new Promise<void>((r) => waiting.push(r));
        yield Uint8Array.of(i);
      }
    })(),
  };
}

async function take(it: AsyncIterator<Uint8Array>, release: () => void): Promise<number> {
  const p = it.next();
  await new Promise((r) => setImmediate(r));
  release();
  const r = await p;
  return r.done === true ? -1 : (r.value[0] ?? -1);
}

describe("ReplayableRequests", () => {
  it("a second attempt gets the requests the first one sent, then the caller's next, with one pull at a time", async () => {
    const s = source(3);
    const r = new ReplayableRequests(s.iterable);
    const first = r.attempt()[Symbol.asyncIterator]();
    expect(await take(first, s.release)).toBe(0);
    // The first attempt is abandoned while waiting for the caller's next message.
    const pending = first.next();
    expect(r.canReplay()).toBe(true);
    const second = r.attempt()[Symbol.asyncIterator]();
    expect((await second.next()).value).toEqual(Uint8Array.of(0));
    const next = second.next();
    await new Promise((x) => setImmediate(x));
    s.release();
    expect((await next).value).toEqual(Uint8Array.of(1));
    // The abandoned attempt's pull resolved with the same message: nothing was swallowed.
    expect((await pending).value).toEqual(Uint8Array.of(1));
    expect(s.pulls()).toBe(2);
  });

  it("no replay once committed (first reply) or past the message bound", async () => {
    const s = source(1);
    const r = new ReplayableRequests(s.iterable);
    r.commit();
    expect(r.canReplay()).toBe(false);
    const many = (async function* () {
      for (let i = 0; i <= replayMaxMessages; i++) yield Uint8Array.of(1);
    })();
    const big = new ReplayableRequests(many);
    let n = 0;
    for await (const _ of big.attempt()) n++;
    expect(n).toBe(replayMaxMessages + 1);
    expect(big.canReplay()).toBe(false);
  });
});
