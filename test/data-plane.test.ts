/**
 * The coordinator's two inference ports (the main grpc-js port and the lean
 * data-plane listener) on inputs at the edges of the transport: a request
 * of 15 MiB (the message limit is 50 MiB), and request bytes that do not decode. A
 * real coordinator with its embedded agent and a backend-sim process.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client as RawClient, credentials, type ClientReadableStream, type ServiceError } from "@grpc/grpc-js";
import { Code, isWardenError } from "@warden/common";
import { InferenceService } from "@warden/proto";
import { createClient, fromGrpcError } from "@warden/grpc";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";

let t: TestCoordinator | undefined;
const ports = { main: "", dataPlane: "" };

beforeAll(async () => {
  t = await startTestCoordinator({ models: [simModel("m"), simModel("slow", { knobs: { predict_delay_ms: 600_000 } })], extra: { inferenceListen: "127.0.0.1:0" } });
  ports.main = t.c.address;
  ports.dataPlane = t.c.inferenceAddress ?? "";
});
afterAll(async () => {
  await t?.close();
});

const identity = (b: Buffer): Buffer => b;

/** Not a PredictRequest / PredictStreamRequest: the model truncated, not UTF-8, or options that are not wire format. */
const garbage: [string, Buffer][] = [
  ["a truncated model", Buffer.from([0x0a, 0x05, 0x61])],
  ["a model that is not UTF-8", Buffer.from([0x0a, 0x01, 0xff])],
  ["options that are not wire format", Buffer.from([0x0a, 0x01, 0x6d, 0x12, 0x02, 0x0f, 0x01])],
];

function unary(c: RawClient, body: Buffer): Promise<unknown> {
  return new Promise((resolve) => {
    c.makeUnaryRequest("/warden.v1.InferenceService/Predict", identity, identity, body, (err: ServiceError | null) => {
      resolve(err ?? "no error");
    });
  });
}

function serverStream(c: RawClient, body: Buffer): Promise<unknown> {
  return new Promise((resolve) => {
    const call: ClientReadableStream<Buffer> = c.makeServerStreamRequest("/warden.v1.InferenceService/PredictStream", identity, identity, body);
    call.on("data", () => undefined);
    call.on("error", resolve);
    call.on("end", () => {
      resolve("no error");
    });
  });
}

describe.each(["dataPlane", "main"] as const)("InferenceService on the %s port", (port) => {
  it("a 15 MiB Predict goes through to the backend and back", async () => {
    const c = createClient(InferenceService, ports[port]);
    const prompt = "p".repeat(15 * 1024 * 1024);
    const r = await c.predict({ model: "m", options: { Prompt: prompt } }, { timeoutMs: 120_000 });
    expect(r.reply?.promptTokens).toBe(prompt.length);
    expect(r.nodeId).toBe("local");
    c.close();
  });

  it("a Predict past its deadline is DEADLINE_EXCEEDED and gives its in-flight place back: the deadline reaches the backend call", async () => {
    const c = createClient(InferenceService, ports[port]);
    // Loaded first, so the deadline falls in the backend call (the backend answers after ten minutes).
    await t?.admin.loadModel({ model: "slow" });
    const err = await c.predict({ model: "slow", options: { Prompt: "late" } }, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(isWardenError(err, Code.DeadlineExceeded), String(err)).toBe(true);
    // Busy tracking (what eviction respects) sees the call end long before the backend would answer:
    // the backend call ended at the deadline (sent to the backend as grpc-timeout, and cancelled from
    // here at the same moment) and the lease completed.
    await expect.poll(async () => (await t?.admin.listModels({}))?.instances.filter((i) => i.model === "slow").map((i) => i.inFlight), { timeout: 10_000 }).toEqual([0]);
    c.close();
  });

  it("counts each routed Predict once by its outcome: ok, a model nobody configured, a deadline in the backend call", async () => {
    const counted = async (outcome: string): Promise<number> => {
      const text = (await t?.c.metricsRegistry.getSingleMetricAsString("warden_routed_calls_total")) ?? "";
      return Number(new RegExp(`^warden_routed_calls_total\\{outcome="${outcome}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? "0");
    };
    const before = { ok: await counted("ok"), notFound: await counted("not_found"), deadline: await counted("deadline_exceeded") };
    const c = createClient(InferenceService, ports[port]);
    await c.predict({ model: "m", options: { Prompt: "hi" } });
    await t?.admin.loadModel({ model: "slow" });
    const unknown = await c.predict({ model: "nobody", options: { Prompt: "hi" } }).catch((e: unknown) => e);
    expect(isWardenError(unknown, Code.NotFound), String(unknown)).toBe(true);
    const late = await c.predict({ model: "slow", options: { Prompt: "late" } }, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(isWardenError(late, Code.DeadlineExceeded), String(late)).toBe(true);
    c.close();
    await expect.poll(async () => ({ ok: await counted("ok"), notFound: await counted("not_found"), deadline: await counted("deadline_exceeded") })).toEqual({ ok: before.ok + 1, notFound: before.notFound + 1, deadline: before.deadline + 1 });
  });

  it.each(garbage)("Predict with %s is INVALID_ARGUMENT naming warden.v1.PredictRequest", async (_what, bytes) => {
    const c = new RawClient(ports[port], credentials.createInsecure());
    const e = fromGrpcError(await unary(c, bytes));
    expect(isWardenError(e, Code.InvalidArgument), e.message).toBe(true);
    expect(e.rawMessage).toMatch(/^request: is not a valid warden\.v1\.PredictRequest: /);
    c.close();
  });

  it.each(garbage)("PredictStream with %s is INVALID_ARGUMENT naming warden.v1.PredictStreamRequest", async (_what, bytes) => {
    const c = new RawClient(ports[port], credentials.createInsecure());
    const e = fromGrpcError(await serverStream(c, bytes));
    expect(isWardenError(e, Code.InvalidArgument), e.message).toBe(true);
    expect(e.rawMessage).toMatch(/^request: is not a valid warden\.v1\.PredictStreamRequest: /);
    c.close();
  });
});
