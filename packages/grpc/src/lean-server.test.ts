import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type IncomingHttpHeaders } from "node:http2";
import { Metadata } from "@grpc/grpc-js";
import { Code, WardenError, isWardenError } from "@warden/common";
import { Backend, Health, HealthCheckResponse_ServingStatus, ServerReflection } from "@warden/proto";
import { LeanGrpcServer, createClient, withUnimplemented, createH2Client, type Client } from "./index.js";
import { decodeText, echoBackend, missingModelMessage, newEchoBackendSeen, waitForAbort } from "./echo-backend.fixture.js";

const seen = newEchoBackendSeen();
const text = decodeText;
const aborted = waitForAbort;

const server = new LeanGrpcServer({ maxReceiveMessageBytes: 64 * 1024 }).add(Backend, echoBackend(seen));
let address = "";

beforeAll(async () => {
  address = (await server.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await server.shutdown(1000);
});

// The standard grpc-js client and the lean one must both work against it.
const clients: [string, () => Client<typeof Backend>][] = [
  ["grpc-js client", () => createClient(Backend, address)],
  ["lean h2 client", () => createH2Client(Backend, address)],
];

describe.each(clients)("LeanGrpcServer with the %s", (_name, client) => {
  it("unary round trip carries metadata both ways and knows its peer", async () => {
    const c = client();
    const md = new Metadata();
    md.set("x-test", "hello");
    let header = "";
    let trailer = "";
    const res = await c.health({}, { metadata: md, onHeader: (h) => (header = String(h.get("x-echo")[0])), onTrailer: (t) => (trailer = String(t.get("x-trailer")[0])) });
    expect(text(res.message)).toBe("OK");
    expect([seen.header, header, trailer]).toEqual(["hello", "hello", "t1"]);
    expect(seen.peer).toMatch(/^127\.0\.0\.1:\d+$/);
    c.close();
  });

  it("serves many concurrent calls, each its own reply", async () => {
    const c = client();
    const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => c.predict({ Prompt: `p${String(i)}`, ModelIdentity: "m" })));
    expect(replies.map((r) => text(r.message))).toEqual(Array.from({ length: 200 }, (_, i) => `echo:p${String(i)}:m`));
    c.close();
  });

  it("a WardenError arrives with its code, exact message and details; other errors stay INTERNAL", async () => {
    const c = client();
    const err = await c.loadModel({ Model: "missing" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.NotFound)).toBe(true);
    expect((err as WardenError).rawMessage).toBe(missingModelMessage);
    expect((err as WardenError).details).toEqual({ field: "Model" });
    const boom = await c.loadModel({ Model: "boom" }).catch((e: unknown) => e);
    expect(isWardenError(boom, Code.Internal)).toBe(true);
    expect((boom as WardenError).rawMessage).toBe("internal error");
    c.close();
  });

  it("streams every reply in order, and a failure after replies arrives as the status", async () => {
    const c = client();
    const got: string[] = [];
    for await (const r of c.predictStream({ Prompt: "x", Tokens: 300 })) got.push(text(r.message));
    expect(got).toEqual(Array.from({ length: 300 }, (_, i) => `t${String(i)}`));
    const partial: string[] = [];
    const err = await (async () => {
      for await (const r of c.predictStream({ Prompt: "fail", Tokens: 2 })) partial.push(text(r.message));
    })().catch((e: unknown) => e);
    expect(partial).toEqual(["t0", "t1"]);
    expect(isWardenError(err, Code.Aborted)).toBe(true);
    c.close();
  });

  it("the caller's deadline ends the call: DEADLINE_EXCEEDED for the caller, the handler's signal aborted", async () => {
    const c = client();
    seen.predictAbort = undefined;
    const err = await c.predict({ Prompt: "hang" }, { timeoutMs: 150 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    // The client resets the stream at its deadline; the server's own timer runs from
    // when the headers arrived, so on a loaded machine the reset can come first and
    // (indistinguishable on the wire from a cancel) read as CANCELLED. Either way the
    // handler is told; the server-side deadline alone is checked below with a raw client.
    await expect.poll(() => (seen.predictAbort as WardenError | undefined)?.code, { timeout: 10_000 }).toBeOneOf([Code.DeadlineExceeded, Code.Canceled]);
    c.close();
  });

  it("a client cancel reaches the handler's signal as CANCELLED, for unary and streams", async () => {
    const c = client();
    seen.predictAbort = undefined;
    seen.streamAbort = undefined;
    const ctl = new AbortController();
    const p = c.predict({ Prompt: "hang" }, { signal: ctl.signal }).catch((e: unknown) => e);
    setTimeout(() => { ctl.abort(); }, 50);
    expect(isWardenError(await p, Code.Canceled)).toBe(true);
    await expect.poll(() => (seen.predictAbort as WardenError | undefined)?.code, { timeout: 10_000 }).toBe(Code.Canceled);
    for await (const r of c.predictStream({ Prompt: "endless", Tokens: 1 })) {
      expect(text(r.message)).toBe("t0");
      break;
    }
    await expect.poll(() => (seen.streamAbort as WardenError | undefined)?.code, { timeout: 10_000 }).toBe(Code.Canceled);
    c.close();
  });

  it("an oversized request is RESOURCE_EXHAUSTED and the server goes on serving", async () => {
    const c = client();
    const err = await c.predict({ Prompt: "x".repeat(128 * 1024) }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.ResourceExhausted)).toBe(true);
    expect(text((await c.predict({ Prompt: "small" })).message)).toBe("echo:small:");
    c.close();
  });

  it("serves grpc.health.v1 Check and List; a method it does not have is UNIMPLEMENTED", async () => {
    const h = client === clients[0]?.[1] ? createClient(Health, address) : createH2Client(Health, address);
    expect((await h.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    const listed = await h.list({});
    expect(Object.fromEntries(Object.entries(listed.statuses).map(([k, v]) => [k, v.status]))).toEqual({ "": HealthCheckResponse_ServingStatus.SERVING, "backend.Backend": HealthCheckResponse_ServingStatus.SERVING });
    expect((await h.check({ service: "backend.Backend" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect(isWardenError(await h.check({ service: "nope" }).catch((e: unknown) => e), Code.NotFound)).toBe(true);
    h.close();
    const r = createClient(ServerReflection, address);
    async function* none() {}
    const err = await (async () => {
      for await (const _ of r.serverReflectionInfo(none())) break;
    })().catch((e: unknown) => e);
    expect(isWardenError(err, Code.Unimplemented)).toBe(true);
    r.close();
  });
});

describe("LeanGrpcServer edges", () => {
  it("refuses a non-gRPC request with HTTP 415", async () => {
    const session = connect(`http://${address}`);
    const status = await new Promise<number>((resolve, reject) => {
      const req = session.request({ ":method": "GET", ":path": "/" });
      req.on("response", (h) => { resolve(Number(h[":status"])); });
      req.on("error", reject);
      req.end();
    });
    session.close();
    expect(status).toBe(415);
  });

  it("replies carry no date header: an OK reply and a trailers-only error are :status, content-type and the gRPC status alone", async () => {
    const session = connect(`http://${address}`);
    // PredictOptions { Prompt (field 1) = "hi" }, framed.
    const body = Buffer.from([0x0a, 2, ...Buffer.from("hi")]);
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, body.length]), body]);
    const call = (path: string): Promise<{ headers: string[]; trailers: string[] }> =>
      new Promise((resolve, reject) => {
        const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
        let headers: string[] = [];
        let trailers: string[] = [];
        req.on("response", (h) => (headers = Object.keys(h).sort()));
        req.on("trailers", (t: IncomingHttpHeaders) => (trailers = Object.keys(t).sort()));
        req.on("close", () => { resolve({ headers, trailers }); });
        req.on("error", reject);
        req.resume();
        req.end(frame);
      });
    const ok = await call("/backend.Backend/Predict");
    const unknown = await call("/backend.Backend/NoSuchMethod");
    session.close();
    expect(ok).toEqual({ headers: [":status", "content-type"], trailers: ["grpc-status"] });
    expect(unknown.headers).toEqual([":status", "content-type", "grpc-message", "grpc-status"]);
  });

  it("the server enforces grpc-timeout itself: the handler's signal is DEADLINE_EXCEEDED and the status 4, with no client reset", async () => {
    seen.predictAbort = undefined;
    const session = connect(`http://${address}`);
    // PredictOptions { Prompt (field 1) = "hang" }, framed; this client never resets the stream.
    const body = Buffer.from([0x0a, 4, ...Buffer.from("hang")]);
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, body.length]), body]);
    const status = await new Promise<string>((resolve, reject) => {
      const req = session.request({ ":method": "POST", ":path": "/backend.Backend/Predict", "content-type": "application/grpc", te: "trailers", "grpc-timeout": "150m" });
      let got = "";
      req.on("response", (h) => { if (h["grpc-status"] !== undefined) got = String(h["grpc-status"]); });
      req.on("trailers", (t) => { got = String(t["grpc-status"]); });
      req.on("close", () => { resolve(got); });
      req.on("error", reject);
      req.resume();
      req.end(frame);
    });
    session.close();
    expect(status).toBe(String(Code.DeadlineExceeded));
    await expect.poll(() => (seen.predictAbort as WardenError | undefined)?.code, { timeout: 10_000 }).toBe(Code.DeadlineExceeded);
  });

  it("a raw unary handler gets the request's bytes and its bytes go back as they are (both clients)", async () => {
    const s = new LeanGrpcServer();
    const impl = {
      async health() {
        return {};
      },
      async loadModel() {
        return {};
      },
      async predict() {
        return { message: new TextEncoder().encode("typed") };
      },
      async *predictStream() {},
      async free() {
        return {};
      },
      async status() {
        return {};
      },
    };
    s.add(Backend, withUnimplemented(Backend, impl));
    let seenBytes = 0;
    s.addRawUnary(Backend.method.predict, async (bytes) => {
      seenBytes = bytes.length;
      // A Reply whose message is the request's own bytes.
      const out = new Uint8Array(2 + bytes.length);
      out[0] = 0x0a;
      out[1] = bytes.length;
      out.set(bytes, 2);
      return out;
    });
    expect(() => s.addRawUnary(Backend.method.predictStream, async (b) => b)).toThrow(/unary/);
    const addr = (await s.listen("127.0.0.1:0")).address;
    const c = createClient(Backend, addr);
    const h = createH2Client(Backend, addr);
    const r = await c.predict({ Prompt: "abc" });
    expect(seenBytes).toBeGreaterThan(0);
    expect(r.message.length).toBe(seenBytes);
    const raw = await h.unaryBytes(Backend.method.predict, Uint8Array.of(0x0a, 0x01, 0x7a)); // Prompt: "z"
    expect([...raw]).toEqual([0x0a, 0x03, 0x0a, 0x01, 0x7a]);
    expect(() => s.addRawUnary(Backend.method.health, async (b) => b)).toThrow(/after listen/);
    c.close();
    h.close();
    await s.shutdown(100);
  });

  it("a raw handler proxying with ctx.cancel (no AbortSignal) passes the caller's cancel on to its own call", async () => {
    const inner = createH2Client(Backend, address);
    const s = new LeanGrpcServer();
    s.add(Backend, echoBackend(newEchoBackendSeen()));
    let cancel: unknown;
    s.addRawUnary(Backend.method.predict, (bytes, ctx) => {
      cancel = ctx.cancel;
      return inner.unaryBytes(Backend.method.predict, bytes, { cancel: ctx.cancel });
    });
    const addr = (await s.listen("127.0.0.1:0")).address;
    const c = createH2Client(Backend, addr);
    seen.predictAbort = undefined;
    const ctl = new AbortController();
    const p = c.predict({ Prompt: "hang" }, { signal: ctl.signal }).catch((e: unknown) => e);
    setTimeout(() => { ctl.abort(); }, 50);
    expect(isWardenError(await p, Code.Canceled)).toBe(true);
    expect(cancel).toBeDefined();
    // The backend behind the proxy is told: its handler's signal reads CANCELLED.
    await expect.poll(() => (seen.predictAbort as WardenError | undefined)?.code, { timeout: 10_000 }).toBe(Code.Canceled);
    c.close();
    inner.close();
    await s.shutdown(100);
  });

  it("answers a bidi-streaming method with a typed handler UNIMPLEMENTED (only raw streams take requests as they come)", async () => {
    const s = new LeanGrpcServer().add(ServerReflection, { serverReflectionInfo: async function* () {} });
    const addr = (await s.listen("127.0.0.1:0")).address;
    const r = createClient(ServerReflection, addr);
    async function* none() {}
    const err = await (async () => {
      for await (const _ of r.serverReflectionInfo(none())) break;
    })().catch((e: unknown) => e);
    expect(isWardenError(err, Code.Unimplemented)).toBe(true);
    r.close();
    await s.shutdown(100);
  });

  it("shutdown marks health NOT_SERVING and ends calls still running after the grace", async () => {
    const s = new LeanGrpcServer();
    let handlerSaw: unknown;
    s.add(Backend, withUnimplemented(Backend, {
      async health() {
        return {};
      },
      async loadModel() {
        return {};
      },
      async predict(_req, ctx) {
        await aborted(ctx);
        handlerSaw = ctx.signal.reason;
        throw WardenError.from(ctx.signal.reason);
      },
      async *predictStream() {},
      async free() {
        return {};
      },
      async status() {
        return {};
      },
    }));
    const addr = (await s.listen("127.0.0.1:0")).address;
    const c = createClient(Backend, addr);
    const pending = c.predict({}).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 50));
    await s.shutdown(100);
    expect(s.health.get("")).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    expect(isWardenError(await pending)).toBe(true);
    expect((handlerSaw as WardenError).code).toBe(Code.Unavailable);
    c.close();
  });
});
