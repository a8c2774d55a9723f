/**
 * LocalAI's backend.Backend served by the coordinator's data-plane listener:
 * a generic grpc-js client talks to the coordinator as if it were one
 * backend, and every method family is routed to real backend-sim processes
 * started by the embedded agent (load on demand, in-flight tracking,
 * deadline, cancel, stale-route retry).
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { Code, isWardenError, type WardenError } from "@warden/common";
import { Backend, InferenceService, StatusResponse_State } from "@warden/proto";
import { createClient, type Client } from "@warden/grpc";
import { simEmbedding } from "@warden/backend-sim";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

let t: TestCoordinator | undefined;
const clients: { dataPlane?: Client<typeof Backend>; main?: Client<typeof Backend> } = {};
let backend: Client<typeof Backend> | undefined;
let dir = "";
/** The stale model's mismatch count (sim knob mismatch_file), shared by all its instances. */
let staleFile = "";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-bdp-"));
  staleFile = join(dir, "stale");
  await writeFile(staleFile, "0");
  t = await startTestCoordinator({
    models: [
      simModel("m"),
      // Replies after the first wait 10 minutes: a stream to cancel midway, a call to time out.
      simModel("hang", { knobs: { predict_delay_ms: 600_000 } }),
      simModel("stale", { knobs: { mismatch_file: staleFile } }),
    ],
    extra: { inferenceListen: "127.0.0.1:0" },
  });
  clients.dataPlane = createClient(Backend, t.c.inferenceAddress ?? "");
  clients.main = createClient(Backend, t.c.address);
  backend = clients.dataPlane;
}, 60_000);
afterAll(async () => {
  clients.dataPlane?.close();
  clients.main?.close();
  await t?.close();
  await rm(dir, { recursive: true, force: true });
});

const b = (): Client<typeof Backend> => backend as Client<typeof Backend>;
const md = (model: string): Metadata => {
  const m = new Metadata();
  m.set("warden-model", model);
  return m;
};
const text = (u: Uint8Array | undefined): string => new TextDecoder().decode(u);
const fail = async (p: Promise<unknown>): Promise<WardenError> => {
  try {
    await p;
  } catch (e) {
    return e as WardenError;
  }
  throw new Error("expected the call to fail");
};
async function instances(model: string): Promise<{ incarnation: string; inFlight: number }[]> {
  return (await t!.admin.listModels({})).instances.filter((i) => i.model === model).map((i) => ({ incarnation: i.incarnation, inFlight: i.inFlight }));
}

// The lean data-plane listener first (it loads the models), then the main grpc-js port.
describe.each(["dataPlane", "main"] as const)("backend.Backend on the %s port", (port) => {
  beforeAll(() => {
    backend = clients[port];
  });

  it("unary: Embedding named in metadata loads the model on demand and answers the backend's bytes", async () => {
    if (port === "dataPlane") expect(await instances("m")).toEqual([]);
    const r = await b().embedding({ Prompt: "hello world" }, { metadata: md("m") });
    expect(r.embeddings.map((x) => Math.round(x * 1000) / 1000)).toEqual(simEmbedding("hello world").map((x) => Math.round(x * 1000) / 1000));
    expect(r.dim).toBe(8);
    expect(await instances("m")).toEqual([expect.objectContaining({ inFlight: 0 })]);
    const p = await b().predict({ Prompt: "p", Tokens: 2 }, { metadata: md("m") });
    expect(text(p.message)).toBe("m: w0 w1");
  });

  it("the model can be named by the request's ModelIdentity field instead (Rerank 4, TokenizeString 54)", async () => {
    const rr = await b().rerank({ query: "red fox", documents: ["blue", "red fox"], ModelIdentity: "m" });
    expect(rr.results.map((x) => x.index)).toEqual([1, 0]);
    const tok = await b().tokenizeString({ Prompt: "ab", ModelIdentity: "m" });
    expect(tok.tokens).toEqual([97, 98]);
    const e = await fail(b().rerank({ query: "q", documents: [], ModelIdentity: "m" }, { metadata: md("other") }));
    expect(isWardenError(e, Code.InvalidArgument), e.message).toBe(true);
    expect(e.rawMessage).toMatch(/^warden-model: names model "other" but RerankRequest\.ModelIdentity names "m"/);
  });

  it("server streaming: TTSStream and PredictStream reply as the backend streams", async () => {
    const replies = [];
    for await (const r of b().tTSStream({ text: "hi" }, { metadata: md("m") })) replies.push(r);
    expect(JSON.parse(text(replies[0]?.message))).toEqual({ sample_rate: 16000 });
    expect(replies.slice(1).reduce((n, r) => n + r.audio.length, 0)).toBe(2 * 160 * 2);
    const tokens: string[] = [];
    for await (const r of b().predictStream({ Tokens: 3 }, { metadata: md("m") })) tokens.push(text(r.message));
    expect(tokens.join("")).toBe("m: w0 w1 w2");
  });

  it("bidi streaming: AudioTranscriptionLive gets the requests as they are sent and streams back", async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    async function* requests() {
      yield { payload: { case: "config" as const, value: { sampleRate: 16000 } } };
      await gate; // the second frame only once the first reply arrived: the call is really bidirectional
      yield { payload: { case: "audio" as const, value: { pcm: [0.5, 0.5, 0.5] } } };
    }
    const got: unknown[] = [];
    for await (const r of b().audioTranscriptionLive(requests(), { metadata: md("m") })) {
      got.push(r.ready ? "ready" : r.finalResult !== undefined ? `final:${r.finalResult.text}` : r.delta);
      release();
    }
    expect(got).toEqual(["ready", "frame0:3", "final:frame0:3"]);
    expect(await instances("m")).toEqual([expect.objectContaining({ inFlight: 0 })]);
  });

  it("cancel mid-stream ends the backend call and leaves in-flight 0", async () => {
    const ctl = new AbortController();
    let seen = 0;
    const run = (async () => {
      // TTSStream's first reply (the sample rate) comes at once; the audio after it never does.
      for await (const _ of b().tTSStream({ text: "hi" }, { metadata: md("hang"), signal: ctl.signal })) {
        seen++;
        await until("in flight while streaming", async () => (await instances("hang")).find((i) => i.inFlight === 1));
        ctl.abort();
      }
    })();
    expect(isWardenError(await fail(run), Code.Canceled)).toBe(true);
    expect(seen).toBe(1);
    await until("in-flight back to 0", async () => (await instances("hang")).find((i) => i.inFlight === 0));
  });

  it("a deadline reaches the backend: DEADLINE_EXCEEDED, in-flight back to 0", async () => {
    await b().status({}, { metadata: md("hang") }); // loaded already (the cancel above); Status makes sure
    const e = await fail(b().embedding({ Prompt: "x" }, { metadata: md("hang"), timeoutMs: 500 }));
    expect(isWardenError(e, Code.DeadlineExceeded), e.message).toBe(true);
    await until("in-flight back to 0", async () => (await instances("hang")).find((i) => i.inFlight === 0));
  });

  it("unknown model is NOT_FOUND naming it; no model is INVALID_ARGUMENT naming warden-model", async () => {
    const e = await fail(b().embedding({ Prompt: "x" }, { metadata: md("nope") }));
    expect(isWardenError(e, Code.NotFound)).toBe(true);
    expect(e.rawMessage).toContain('"nope"');
    const none = await fail(b().embedding({ Prompt: "x" }));
    expect(isWardenError(none, Code.InvalidArgument)).toBe(true);
    expect(none.rawMessage).toMatch(/^warden-model: is required: name the model in request metadata warden-model or PredictOptions\.ModelIdentity/);
    const live = await fail((async () => {
      for await (const _ of b().audioTranscriptionLive((async function* () {})())) break;
    })());
    expect(isWardenError(live, Code.InvalidArgument)).toBe(true);
    expect(live.rawMessage).toMatch(/^warden-model: is required: name the model in request metadata warden-model$/);
  });

  it("the backend's UNIMPLEMENTED comes back as it is; Health answers here; LoadModel and Free are refused; Status is routed", async () => {
    const e = await fail(b().generateVideo({ prompt: "cat" }, { metadata: md("m") }));
    expect(isWardenError(e, Code.Unimplemented)).toBe(true);
    expect(e.rawMessage).toBe("method GenerateVideo not implemented");
    expect(text((await b().health({})).message)).toBe("OK");
    for (const call of [b().loadModel({ Model: "m" }, { metadata: md("m") }), b().free({}, { metadata: md("m") })]) {
      const refused = await fail(call);
      expect(isWardenError(refused, Code.FailedPrecondition)).toBe(true);
      expect(refused.rawMessage).toMatch(/^Warden manages (loading|unloading)/);
    }
    expect((await b().status({}, { metadata: md("m") })).state).toBe(StatusResponse_State.READY);
  });
});

describe("a backend answering NOT_FOUND model identity mismatch is a stale route", () => {
  beforeAll(() => {
    backend = clients.dataPlane;
  });

  it("the instance is removed and the call retried once on a fresh instance", async () => {
    await b().status({}, { metadata: md("stale") }); // Status carries no identity: never stale
    const [first] = await instances("stale");
    await writeFile(staleFile, "1");
    const r = await b().embedding({ Prompt: "x" }, { metadata: md("stale") });
    expect(r.dim).toBe(8);
    expect(await readFile(staleFile, "utf8")).toBe("0");
    await until("the stale instance removed", async () => {
      const now = await instances("stale");
      return now.length === 1 && now[0]?.incarnation !== first?.incarnation;
    });
  });

  it("retried once only: a second stale answer fails the call NOT_FOUND", async () => {
    await writeFile(staleFile, "5");
    const e = await fail(b().predict({ Prompt: "x" }, { metadata: md("stale") }));
    expect(isWardenError(e, Code.NotFound)).toBe(true);
    expect(e.rawMessage).toContain("model identity mismatch");
    expect(await readFile(staleFile, "utf8")).toBe("3");
    await writeFile(staleFile, "0");
  });

  it("InferenceService.Predict on the data plane retries a stale route too", async () => {
    const inference = createClient(InferenceService, t!.c.inferenceAddress ?? "");
    try {
      await writeFile(staleFile, "0");
      await inference.predict({ model: "stale", options: { Prompt: "p" } }); // loaded before it goes stale
      await writeFile(staleFile, "1");
      const r = await inference.predict({ model: "stale", options: { Prompt: "p", Tokens: 1 } });
      expect(text(r.reply?.message)).toBe("stale: w0");
      expect(await readFile(staleFile, "utf8")).toBe("0");
    } finally {
      inference.close();
    }
  });
});
