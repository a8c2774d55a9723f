import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Backend } from "@warden/proto";
import { GrpcServer, createClient, createH2Client } from "./index.js";
import { decodeText, echoBackend, newEchoBackendSeen } from "./echo-backend.fixture.js";

// The coordinator holds a client per backend (10 000 at 1 000 nodes); the
// Backend service has about fifty RPCs and routing calls two. A client makes
// a method when it is first read, so an idle client holds none.

const server = new GrpcServer().add(Backend, echoBackend(newEchoBackendSeen()));
let address = "";

beforeAll(async () => {
  address = (await server.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await server.shutdown(1000);
});

const makers = [
  ["createH2Client", () => createH2Client(Backend, address)],
  ["createClient", () => createClient(Backend, address)],
] as const;

describe.each(makers)("%s makes its methods on first use", (_name, make) => {
  it("a new client owns no method functions; the first read makes one, later reads get the same one", async () => {
    const c = make();
    const own = (): string[] => Object.getOwnPropertyNames(c).filter((k) => Backend.methods.some((m) => m.localName === k));
    expect(own()).toEqual([]);
    expect(Backend.methods.length).toBeGreaterThan(40);
    const predict = c.predict;
    expect(c.predict).toBe(predict);
    expect(own()).toEqual(["predict"]);
    // Read off the object (destructured), it still calls this client's server.
    const { health } = c;
    expect(decodeText((await health({})).message)).toBe("OK");
    expect(decodeText((await predict({ Prompt: "p", ModelIdentity: "m" })).message)).toBe("echo:p:m");
    c.close();
  });

  it("two clients never share a method; a method assigned on one stays that client's", () => {
    const a = make();
    const b = make();
    expect(a.predict).not.toBe(b.predict);
    const stand = (): Promise<never> => Promise.reject(new Error("stand-in"));
    (a as { embedding: unknown }).embedding = stand;
    expect(a.embedding).toBe(stand);
    expect(b.embedding).not.toBe(stand);
    expect(typeof b.embedding).toBe("function");
    a.close();
    b.close();
  });
});
