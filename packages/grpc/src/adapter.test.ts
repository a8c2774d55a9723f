import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, WardenError, isWardenError } from "@warden/common";
import { Backend, Health, PredictOptionsSchema, HealthCheckResponse_ServingStatus, ServerReflection, StatusResponse_State, reflectionV1alpha, type ServerReflectionRequestSchema } from "@warden/proto";
import { GrpcServer, createClient, withUnimplemented, maxHealthListServices, type HandlerContext } from "./index.js";
import { RawGrpc, frame } from "../../../test/support/raw-grpc.js";

/** Records what handlers observed, so tests can assert on the server side too. */
const seen = { predictAbortReason: undefined as unknown, streamAbortReason: undefined as unknown, header: "", ctx: undefined as HandlerContext | undefined, lateSignal: undefined as AbortSignal | undefined };
let resolvePredictAborted: () => void = () => {};
let predictAborted = new Promise<void>((r) => (resolvePredictAborted = r));

function waitForAbort(ctx: HandlerContext): Promise<void> {
  return new Promise((resolve) => {
    if (ctx.signal.aborted) resolve();
    ctx.signal.addEventListener("abort", () => { resolve(); }, { once: true });
  });
}

const server = new GrpcServer({ maxReceiveMessageBytes: 64 * 1024 });
server.add(Backend, withUnimplemented(Backend, {
  async health(_req, ctx) {
    seen.header = String(ctx.metadata.get("x-test")[0] ?? "");
    ctx.responseHeader.set("x-echo", seen.header);
    ctx.responseTrailer.set("x-trailer", "t1");
    return { message: new TextEncoder().encode("OK") };
  },
  async loadModel(req) {
    if (req.Model === "missing") {
      throw new WardenError(Code.NotFound, `model "missing" not found`, { details: { field: "Model" } });
    }
    if (req.Model === "boom") throw new Error("secret internals");
    return { success: true, message: `loaded ${req.Model}` };
  },
  async predict(req, ctx) {
    // The signal is made when first read: these read it only after the call ended (completed, or past its deadline).
    if (req.Prompt === "keep-context") seen.ctx = ctx;
    if (req.Prompt === "sleep-past-deadline") {
      await new Promise((r) => setTimeout(r, 400));
      seen.lateSignal = ctx.signal;
    }
    if (req.Prompt === "hang") {
      await waitForAbort(ctx);
      seen.predictAbortReason = ctx.signal.reason;
      resolvePredictAborted();
      throw WardenError.from(ctx.signal.reason);
    }
    return { message: new TextEncoder().encode(`echo:${req.Prompt}`), tokens: req.Prompt.length };
  },
  async *predictStream(req, ctx) {
    const n = req.Tokens;
    for (let i = 0; i < n; i++) yield { message: new TextEncoder().encode(`t${i}`) };
    if (req.Prompt === "endless") {
      await waitForAbort(ctx);
      seen.streamAbortReason = ctx.signal.reason;
    }
  },
  async free() {
    throw new WardenError(Code.Unimplemented, "Free is not implemented");
  },
  async status() {
    return { state: StatusResponse_State.READY };
  },
}));

let address = "";
const client = () => createClient(Backend, address);

beforeAll(async () => {
  address = (await server.listen("127.0.0.1:0")).address;
});
afterAll(async () => {
  await server.shutdown(1000);
});

describe("grpc adapter over real loopback sockets", () => {
  it("unary round trip carries metadata both ways", async () => {
    const c = client();
    const md = new Metadata();
    md.set("x-test", "hello");
    let header = "";
    let trailer = "";
    const res = await c.health({}, { metadata: md, onHeader: (h) => (header = String(h.get("x-echo")[0])), onTrailer: (t) => (trailer = String(t.get("x-trailer")[0])) });
    expect(new TextDecoder().decode(res.message)).toBe("OK");
    expect(seen.header).toBe("hello");
    expect(header).toBe("hello");
    expect(trailer).toBe("t1");
    c.close();
  });

  it("server streaming delivers every message in order, then OK", async () => {
    const c = client();
    const got: string[] = [];
    for await (const r of c.predictStream({ Prompt: "x", Tokens: 5 })) got.push(new TextDecoder().decode(r.message));
    expect(got).toEqual(["t0", "t1", "t2", "t3", "t4"]);
    c.close();
  });

  it("a client deadline gives DEADLINE_EXCEEDED and fires the handler's signal", async () => {
    const c = client();
    predictAborted = new Promise<void>((r) => (resolvePredictAborted = r));
    const err = await c.predict({ Prompt: "hang" }, { timeoutMs: 150 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded)).toBe(true);
    await predictAborted;
    expect(isWardenError(seen.predictAbortReason)).toBe(true);
    c.close();
  });

  it("a signal first read after its call completed is already aborted, as completion", async () => {
    const c = client();
    await c.predict({ Prompt: "keep-context" });
    const signal = seen.ctx?.signal;
    expect(signal?.aborted).toBe(true);
    expect((signal?.reason as WardenError).code).toBe(Code.Canceled);
    expect((signal?.reason as WardenError).rawMessage).toBe("call completed");
    c.close();
  });

  it("a signal first read after the call's deadline passed is already aborted DEADLINE_EXCEEDED", async () => {
    // A raw HTTP/2 caller that sends grpc-timeout and never cancels: the server's own deadline ends
    // the call. (A gRPC client cancels at its deadline too, and a loaded server that took the request
    // late may see that cancel before its own deadline — a cancel is all it can know then.)
    const raw = new RawGrpc(address);
    seen.lateSignal = undefined;
    try {
      const out = await raw.call("/backend.Backend/Predict", frame(toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: "sleep-past-deadline" }))), { timeoutMs: 100 });
      expect(out.status).toBe(4); // DEADLINE_EXCEEDED
      await expect.poll(() => seen.lateSignal, { timeout: 10_000 }).toBeDefined();
      const late = seen.lateSignal as AbortSignal | undefined;
      expect(late?.aborted).toBe(true);
      expect((late?.reason as WardenError).code).toBe(Code.DeadlineExceeded);
    } finally {
      raw.close();
    }
  });

  it("a client AbortSignal cancels the call and reaches the handler's signal", async () => {
    const c = client();
    predictAborted = new Promise<void>((r) => (resolvePredictAborted = r));
    const ctl = new AbortController();
    const p = c.predict({ Prompt: "hang" }, { signal: ctl.signal }).catch((e: unknown) => e);
    setTimeout(() => { ctl.abort(); }, 50);
    const err = await p;
    expect(isWardenError(err, Code.Canceled)).toBe(true);
    await predictAborted;
    expect((seen.predictAbortReason as WardenError).code).toBe(Code.Canceled);
    c.close();
  });

  it("cancelling a server stream fires the handler's signal", async () => {
    const c = client();
    const ctl = new AbortController();
    seen.streamAbortReason = undefined;
    const got: string[] = [];
    const err = await (async () => {
      for await (const r of c.predictStream({ Prompt: "endless", Tokens: 2 }, { signal: ctl.signal })) {
        got.push(new TextDecoder().decode(r.message));
        if (got.length === 2) ctl.abort();
      }
    })().catch((e: unknown) => e);
    expect(got).toEqual(["t0", "t1"]);
    expect(isWardenError(err, Code.Canceled)).toBe(true);
    await expect.poll(() => seen.streamAbortReason, { timeout: 10_000 }).toBeInstanceOf(WardenError);
    c.close();
  });

  it("a thrown WardenError arrives with its code, message and structured details", async () => {
    const c = client();
    const err = await c.loadModel({ Model: "missing" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.NotFound)).toBe(true);
    expect((err as WardenError).rawMessage).toBe(`model "missing" not found`);
    expect((err as WardenError).details).toEqual({ field: "Model" });
    const unimpl = await c.free({}).catch((e: unknown) => e);
    expect(isWardenError(unimpl, Code.Unimplemented)).toBe(true);
    c.close();
  });

  it("any other thrown error becomes INTERNAL without leaking its message", async () => {
    const c = client();
    const err = await c.loadModel({ Model: "boom" }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.Internal)).toBe(true);
    expect((err as WardenError).rawMessage).toBe("internal error");
    c.close();
  });

  it("an oversized request is rejected with RESOURCE_EXHAUSTED", async () => {
    const c = client();
    const err = await c.predict({ Prompt: "x".repeat(128 * 1024) }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.ResourceExhausted)).toBe(true);
    // and the server still serves normal calls afterwards
    const ok = await c.predict({ Prompt: "small" });
    expect(new TextDecoder().decode(ok.message)).toBe("echo:small");
    c.close();
  });

  it("health answers SERVING, then NOT_SERVING, and Watch sees the change", async () => {
    const h = createClient(Health, address);
    expect((await h.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await h.check({ service: "backend.Backend" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    const unknown = await h.check({ service: "nope.Service" }).catch((e: unknown) => e);
    expect(isWardenError(unknown, Code.NotFound)).toBe(true);
    const ctl = new AbortController();
    const statuses: number[] = [];
    const watching = (async () => {
      for await (const r of h.watch({ service: "backend.Backend" }, { signal: ctl.signal })) {
        statuses.push(r.status);
        if (statuses.length === 1) server.health.set("backend.Backend", HealthCheckResponse_ServingStatus.NOT_SERVING);
        if (statuses.length === 2) ctl.abort();
      }
    })().catch(() => undefined);
    await watching;
    expect(statuses).toEqual([HealthCheckResponse_ServingStatus.SERVING, HealthCheckResponse_ServingStatus.NOT_SERVING]);
    expect((await h.check({ service: "backend.Backend" })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    server.health.set("backend.Backend", HealthCheckResponse_ServingStatus.SERVING);
    h.close();
  });

  it("health List answers every service's status over loopback, and RESOURCE_EXHAUSTED above 100 services", async () => {
    const h = createClient(Health, address);
    const statusesOf = async (c: typeof h): Promise<Record<string, number>> => Object.fromEntries(Object.entries((await c.list({}, { timeoutMs: 10_000 })).statuses).map(([k, v]) => [k, v.status]));
    expect(await statusesOf(h)).toEqual({ "": HealthCheckResponse_ServingStatus.SERVING, "backend.Backend": HealthCheckResponse_ServingStatus.SERVING });
    server.health.set("backend.Backend", HealthCheckResponse_ServingStatus.NOT_SERVING);
    expect(await statusesOf(h)).toEqual({ "": HealthCheckResponse_ServingStatus.SERVING, "backend.Backend": HealthCheckResponse_ServingStatus.NOT_SERVING });
    server.health.set("backend.Backend", HealthCheckResponse_ServingStatus.SERVING);
    h.close();

    // The bound on a server of its own: 99 services plus "" is the most one List answers.
    const big = new GrpcServer();
    for (let i = 0; i < maxHealthListServices - 1; i++) big.health.set(`svc.S${String(i)}`, HealthCheckResponse_ServingStatus.SERVING);
    const bigAddress = (await big.listen("127.0.0.1:0")).address;
    const hb = createClient(Health, bigAddress);
    try {
      expect(Object.keys(await statusesOf(hb))).toHaveLength(maxHealthListServices);
      big.health.set("svc.OneTooMany", HealthCheckResponse_ServingStatus.SERVING);
      expect(isWardenError(await hb.list({}).catch((e: unknown) => e), Code.ResourceExhausted)).toBe(true);
    } finally {
      hb.close();
      await big.shutdown(1_000);
    }
  });

  it("reflection (v1 and v1alpha) lists every service and returns decodable descriptors", async () => {
    const r = createClient(ServerReflection, address);
    async function* one(req: MessageInitShape<typeof ServerReflectionRequestSchema>) {
      yield req;
    }
    const answers = [];
    for await (const a of r.serverReflectionInfo(one({ messageRequest: { case: "listServices", value: "*" } }))) answers.push(a);
    const list = answers[0]?.messageResponse;
    expect(list?.case).toBe("listServicesResponse");
    const names = list?.case === "listServicesResponse" ? list.value.service.map((s) => s.name).sort() : [];
    expect(names).toEqual(["backend.Backend", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]);

    const files = [];
    for await (const a of r.serverReflectionInfo(one({ messageRequest: { case: "fileContainingSymbol", value: "backend.Backend.PredictStream" } }))) files.push(a);
    const fd = files[0]?.messageResponse;
    expect(fd?.case).toBe("fileDescriptorResponse");
    const protos = fd?.case === "fileDescriptorResponse" ? fd.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b)) : [];
    expect(protos[0]?.name).toBe("backend/backend.proto");
    expect(protos[0]?.service[0]?.method.map((m) => m.name)).toContain("PredictStream");

    const missing = [];
    for await (const a of r.serverReflectionInfo(one({ messageRequest: { case: "fileContainingSymbol", value: "no.Such" } }))) missing.push(a);
    expect(missing[0]?.messageResponse.case).toBe("errorResponse");
    r.close();

    const alpha = createClient(reflectionV1alpha.ServerReflection, address);
    const alphaAnswers = [];
    async function* oneAlpha() {
      yield { messageRequest: { case: "listServices" as const, value: "" } };
    }
    for await (const a of alpha.serverReflectionInfo(oneAlpha())) alphaAnswers.push(a);
    expect(alphaAnswers[0]?.messageResponse.case).toBe("listServicesResponse");
    alpha.close();
  });
});
