import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { checkListenersBindable } from "./listener-check.js";

const held: Server[] = [];
afterEach(async () => {
  await Promise.all(held.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A listener on a free loopback port, held until the test ends; its host:port. */
async function hold(): Promise<string> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen({ host: "127.0.0.1", port: 0 }, resolve));
  held.push(s);
  const a = s.address();
  if (a === null || typeof a === "string") throw new Error("no TCP address");
  return `127.0.0.1:${String(a.port)}`;
}

describe("checkListenersBindable", () => {
  it("names each leader listener another process holds, with the bind error", async () => {
    const http = await hold();
    const inference = await hold();
    expect(await checkListenersBindable({ httpListen: http, inferenceListen: inference })).toEqual([
      { field: "httpListen", address: http, error: "EADDRINUSE" },
      { field: "inferenceListen", address: inference, error: "EADDRINUSE" },
    ]);
  });

  it("is empty when they can bind, when unset, for port 0, and for an address the standby itself serves", async () => {
    const http = await hold();
    const free = await hold();
    await new Promise((r) => held.pop()!.close(r)); // free again
    expect(await checkListenersBindable({ httpListen: free, inferenceListen: undefined })).toEqual([]);
    expect(await checkListenersBindable({ httpListen: undefined, inferenceListen: "127.0.0.1:0" })).toEqual([]);
    expect(await checkListenersBindable({ httpListen: http, inferenceListen: undefined }, [http])).toEqual([]);
  });
});
