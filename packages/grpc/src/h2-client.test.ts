import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { constants as http2Constants } from "node:http2";
import { createServer } from "node:net";
import { Metadata } from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { CallSignal, Code, WardenError, isWardenError } from "@warden/common";
import { Backend, PredictOptionsSchema, ServerReflection } from "@warden/proto";
import { GrpcServer, createH2Client } from "./index.js";
import { h2c } from "./h2-connection.js";
import { decodeText, echoBackend, missingModelMessage, newEchoBackendSeen } from "./echo-backend.fixture.js";

const seen = newEchoBackendSeen();
const text = decodeText;

function backendServer(): GrpcServer {
  return new GrpcServer({ maxReceiveMessageBytes: 64 * 1024 }).add(Backend, echoBackend(seen));
}

const server = backendServer();
let address = "";

beforeAll(async () => {
  address = (await server.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await server.shutdown(1000);
});

/** A loopback port nobody listens on. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

describe("createH2Client against a real grpc-js server on loopback", () => {
  it("unary round trip carries metadata both ways", async () => {
    const c = createH2Client(Backend, address);
    const md = new Metadata();
    md.set("x-test", "hello");
    let header = "";
    let trailer = "";
    const res = await c.health({}, { metadata: md, onHeader: (h) => (header = String(h.get("x-echo")[0])), onTrailer: (t) => (trailer = String(t.get("x-trailer")[0])) });
    expect(text(res.message)).toBe("OK");
    expect(seen.header).toBe("hello");
    expect(header).toBe("hello");
    expect(trailer).toBe("t1");
    c.close();
  });

  it("many concurrent calls share one connection and each gets its own reply", async () => {
    const c = createH2Client(Backend, address);
    const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => c.predict({ Prompt: `p${String(i)}`, ModelIdentity: "m" })));
    expect(replies.map((r) => text(r.message))).toEqual(Array.from({ length: 200 }, (_, i) => `echo:p${String(i)}:m`));
    c.close();
  });

  it("a WardenError arrives with its code, percent-decoded message and details; other errors stay INTERNAL", async () => {
    const c = createH2Client(Backend, address);
    const err = await c.loadModel({ Model: "missing" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.NotFound)).toBe(true);
    expect((err as WardenError).rawMessage).toBe(missingModelMessage);
    expect((err as WardenError).details).toEqual({ field: "Model" });
    const boom = await c.loadModel({ Model: "boom" }).catch((e: unknown) => e);
    expect(isWardenError(boom, Code.Internal)).toBe(true);
    expect((boom as WardenError).rawMessage).toBe("internal error");
    expect(isWardenError(await c.free({}).catch((e: unknown) => e), Code.Unimplemented)).toBe(true);
    c.close();
  });

  it("server streaming delivers every reply in order to a slow reader, and a status after replies", async () => {
    const c = createH2Client(Backend, address);
    const got: string[] = [];
    for await (const r of c.predictStream({ Prompt: "x", Tokens: 300 })) {
      got.push(text(r.message));
      if (got.length % 50 === 0) await new Promise((r) => setTimeout(r, 5));
    }
    expect(got).toEqual(Array.from({ length: 300 }, (_, i) => `t${String(i)}`));
    const partial: string[] = [];
    const err = await (async () => {
      for await (const r of c.predictStream({ Prompt: "fail", Tokens: 2 })) partial.push(text(r.message));
    })().catch((e: unknown) => e);
    expect(partial).toEqual(["t0", "t1"]);
    expect(isWardenError(err, Code.Aborted)).toBe(true);
    c.close();
  });

  it("a deadline gives DEADLINE_EXCEEDED and reaches the handler's signal", async () => {
    const c = createH2Client(Backend, address);
    seen.predictAbort = undefined;
    const err = await c.predict({ Prompt: "hang" }, { timeoutMs: 150 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    await expect.poll(() => seen.predictAbort, { timeout: 10_000 }).toBeInstanceOf(WardenError);
    const past = await c.predict({ Prompt: "x" }, { deadlineAtMs: Date.now() - 1 }).catch((e: unknown) => e);
    expect(isWardenError(past, Code.DeadlineExceeded)).toBe(true);
    c.close();
  });

  it("with cancelAtDeadline the deadline goes to the server but arms no timer of its own: the cancel ends the call", async () => {
    const c = createH2Client(Backend, address);
    const timers = vi.spyOn(globalThis, "setTimeout");
    // The deadline is a minute away: timers that long are this call's (the client's, and the server's in this process).
    const longTimers = (): number => timers.mock.calls.filter(([, ms]) => typeof ms === "number" && ms > 30_000).length;
    const hangUntilCancelled = async (cancelAtDeadline: boolean): Promise<number> => {
      const before = longTimers();
      seen.predictDeadlineAtMs = undefined;
      const cancel = new CallSignal();
      const request = toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: "hang" }));
      const p = c.unaryBytes(Backend.method.predict, request, { cancel, deadlineAtMs: Date.now() + 60_000, cancelAtDeadline }).catch((e: unknown) => e);
      await expect.poll(() => seen.predictDeadlineAtMs, { timeout: 10_000 }).toBeGreaterThan(Date.now() + 30_000);
      const armed = longTimers() - before;
      cancel.abort(new WardenError(Code.DeadlineExceeded, "call deadline exceeded"));
      expect(isWardenError(await p, Code.DeadlineExceeded)).toBe(true);
      return armed;
    };
    try {
      const withFlag = await hangUntilCancelled(true);
      const without = await hangUntilCancelled(false);
      expect(without - withFlag).toBe(1);
    } finally {
      timers.mockRestore();
      c.close();
    }
  });

  it("an AbortSignal cancels a unary call with its reason and reaches the handler", async () => {
    const c = createH2Client(Backend, address);
    seen.predictAbort = undefined;
    const ctl = new AbortController();
    const p = c.predict({ Prompt: "hang" }, { signal: ctl.signal }).catch((e: unknown) => e);
    setTimeout(() => { ctl.abort(new WardenError(Code.Canceled, "caller left")); }, 50);
    const err = await p;
    expect(isWardenError(err, Code.Canceled)).toBe(true);
    expect((err as WardenError).rawMessage).toBe("caller left");
    await expect.poll(() => (seen.predictAbort as WardenError | undefined)?.code, { timeout: 10_000 }).toBe(Code.Canceled);
    c.close();
  });

  it("an already-aborted signal rejects with its reason and sends nothing", async () => {
    const c = createH2Client(Backend, address);
    const ctl = new AbortController();
    ctl.abort(new WardenError(Code.Canceled, "gone before the call"));
    const err = await c.predict({ Prompt: "x" }, { signal: ctl.signal }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.Canceled)).toBe(true);
    expect((err as WardenError).rawMessage).toBe("gone before the call");
    const streamErr = await (async () => {
      for await (const _ of c.predictStream({ Prompt: "x", Tokens: 1 }, { signal: ctl.signal })) break;
    })().catch((e: unknown) => e);
    expect(isWardenError(streamErr, Code.Canceled)).toBe(true);
    c.close();
  });

  it("leaving a stream loop early cancels the server's handler", async () => {
    const c = createH2Client(Backend, address);
    seen.streamAbort = undefined;
    const got: string[] = [];
    for await (const r of c.predictStream({ Prompt: "endless", Tokens: 2 })) {
      got.push(text(r.message));
      if (got.length === 2) break;
    }
    expect(got).toEqual(["t0", "t1"]);
    await expect.poll(() => seen.streamAbort, { timeout: 10_000 }).toBeInstanceOf(WardenError);
    c.close();
  });

  it("oversized messages are RESOURCE_EXHAUSTED both ways, and the connection still serves", async () => {
    const c = createH2Client(Backend, address, { maxReceiveMessageBytes: 100 * 1024, maxSendMessageBytes: 32 * 1024 });
    const tooBig = await c.predict({ Prompt: "x".repeat(40 * 1024) }).catch((e: unknown) => e);
    expect(isWardenError(tooBig, Code.ResourceExhausted)).toBe(true);
    const bigReply = await c.predict({ Prompt: "big" }).catch((e: unknown) => e);
    expect(isWardenError(bigReply, Code.ResourceExhausted)).toBe(true);
    expect(text((await c.predict({ Prompt: "ok", ModelIdentity: "m" })).message)).toBe("echo:ok:m");
    c.close();
  });

  it("nobody listening is UNAVAILABLE", async () => {
    const c = createH2Client(Backend, `127.0.0.1:${String(await closedPort())}`);
    const err = await c.predict({ Prompt: "x" }, { timeoutMs: 5_000 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.Unavailable)).toBe(true);
    c.close();
  });

  it("a server that goes away mid-call gives UNAVAILABLE, and a server back on the address is reached again", async () => {
    const s = backendServer();
    const addr = (await s.listen("127.0.0.1:0")).address;
    const c = createH2Client(Backend, addr);
    expect(text((await c.predict({ Prompt: "a" })).message)).toBe("echo:a:");
    const inFlight = c.predict({ Prompt: "hang" }).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 50));
    await s.shutdown(0);
    expect(isWardenError(await inFlight, Code.Unavailable)).toBe(true);
    const down = await c.predict({ Prompt: "b" }).catch((e: unknown) => e);
    expect(isWardenError(down, Code.Unavailable)).toBe(true);
    const again = backendServer();
    await again.listen(addr);
    expect(text((await c.predict({ Prompt: "c" })).message)).toBe("echo:c:");
    c.close();
    await again.shutdown(1000);
  });

  it("a closed client refuses calls with UNAVAILABLE", async () => {
    const c = createH2Client(Backend, address);
    c.close();
    expect(isWardenError(await c.predict({}).catch((e: unknown) => e), Code.Unavailable)).toBe(true);
  });

  it("a typed bidi-streaming method streams: each request encoded as it comes, each reply decoded", async () => {
    const c = createH2Client(ServerReflection, address);
    const replies: string[] = [];
    for await (const r of c.serverReflectionInfo((async function* () {
      yield { messageRequest: { case: "listServices" as const, value: "" } };
    })())) replies.push(r.messageResponse.case ?? "none");
    expect(replies).toEqual(["listServicesResponse"]);
    c.close();
  });
});

describe("the lean client's copy of node:http2's constants", () => {
  it("matches node:http2 (it exists so a call is built before node:http2 loads)", () => {
    for (const [k, v] of Object.entries(h2c)) expect([k, v]).toEqual([k, (http2Constants as Record<string, unknown>)[k]]);
  });
});

