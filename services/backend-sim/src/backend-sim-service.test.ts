import { describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ManualClock, isWardenError, type WardenError } from "@warden/common";
import type { HandlerContext } from "@warden/grpc";
import { GenerateImageRequestSchema, GenerateVideoRequestSchema, HealthMessageSchema, ModelOptionsSchema, PredictOptionsSchema, RerankRequestSchema, StatusResponse_State, TTSRequestSchema, TranscriptLiveRequestSchema, TranscriptRequestSchema } from "@warden/proto";
import { createBackendSim } from "./backend-sim-service.js";
import { defaultSimKnobs } from "./sim-knobs.js";

function ctx(signal = new AbortController().signal): HandlerContext {
  return { signal, metadata: new Metadata(), peer: "test", deadlineAtMs: undefined, responseHeader: new Metadata(), responseTrailer: new Metadata() };
}

function sim(knobs = {}) {
  const exits: { code: number; reason: string }[] = [];
  const ignore: boolean[] = [];
  const clock = new ManualClock();
  const s = createBackendSim({ knobs: { ...defaultSimKnobs, ...knobs }, clock, hooks: { exit: (code, reason) => exits.push({ code, reason }), setIgnoreSigterm: (v) => ignore.push(v) } });
  return { s, exits, ignore, clock };
}

const load = (model: string, options: string[] = []) => create(ModelOptionsSchema, { Model: model, Options: options });
const predict = (identity: string, tokens = 0) => create(PredictOptionsSchema, { Prompt: "p", ModelIdentity: identity, Tokens: tokens });
const empty = create(HealthMessageSchema, {});
const text = (b: Uint8Array) => new TextDecoder().decode(b);

describe("backend-sim service", () => {
  it("echoes the loaded model and rejects another ModelIdentity with NOT_FOUND model identity mismatch, as upstream", async () => {
    const { s } = sim();
    expect(isWardenError(await s.impl.predict(predict("a"), ctx()).catch((e: unknown) => e), Code.FailedPrecondition)).toBe(true);
    expect(await s.impl.loadModel(load("a"), ctx())).toMatchObject({ success: true });
    const r = await s.impl.predict(predict("a", 2), ctx());
    expect(text(r.message as Uint8Array)).toBe("a: w0 w1");
    const wrong = await s.impl.predict(predict("b"), ctx()).catch((e: unknown) => e);
    expect(isWardenError(wrong, Code.NotFound)).toBe(true);
    expect((wrong as WardenError).rawMessage).toBe('backend-sim: model identity mismatch: loaded "a", requested "b"');
    const embedWrong = await s.impl.embedding(predict("b"), ctx()).catch((e: unknown) => e);
    expect(isWardenError(embedWrong, Code.NotFound)).toBe(true);
    const tokens: string[] = [];
    for await (const t of s.impl.predictStream(predict("a"), ctx())) tokens.push(text(t.message as Uint8Array));
    expect(tokens).toEqual(["a: w0", " w1", " w2"]);
    expect((await s.impl.status(empty, ctx())).state).toBe(StatusResponse_State.READY);
  });

  it("applies knobs from LoadModel options: fail_load, exit_code, ignore_sigterm, alloc_mib", async () => {
    const failing = sim();
    expect(await failing.s.impl.loadModel(load("a", ["sim.fail_load:no weights"]), ctx())).toEqual({ success: false, message: "no weights" });
    const exiting = sim();
    await exiting.s.impl.loadModel(load("a", ["sim.exit_code:5"]), ctx());
    expect(exiting.exits).toEqual([{ code: 5, reason: "exit_code knob in LoadModel" }]);
    const stubborn = sim();
    await stubborn.s.impl.loadModel(load("a", ["sim.ignore_sigterm:true", "sim.alloc_mib:2"]), ctx());
    expect(stubborn.ignore).toEqual([true]);
    expect(stubborn.s.state().allocatedBytes).toBe(2 * 1024 * 1024);
    const st = await stubborn.s.impl.status(empty, ctx());
    expect(st.memory?.breakdown?.alloc).toBe(2n * 1024n * 1024n);
  });

  it("crashes on the Nth request when crash_after is N", async () => {
    const { s, exits } = sim({ crashAfter: 2, crashExitCode: 70 });
    await s.impl.loadModel(load("a"), ctx());
    await s.impl.predict(predict("a"), ctx());
    expect(exits).toEqual([]);
    await s.impl.predict(predict("a"), ctx());
    expect(exits).toEqual([{ code: 70, reason: "crash_after 2 requests" }]);
  });

  it("Free: ok releases the model; unimplemented, fail and hang answer as told", async () => {
    const ok = sim({ allocMib: 1 });
    await ok.s.impl.loadModel(load("a"), ctx());
    expect(await ok.s.impl.free(empty, ctx())).toEqual({ success: true, message: "freed" });
    expect(ok.s.state()).toMatchObject({ model: undefined, allocatedBytes: 0, freeCalls: 1 });
    expect(isWardenError(await sim({ free: "unimplemented" }).s.impl.free(empty, ctx()).catch((e: unknown) => e), Code.Unimplemented)).toBe(true);
    expect(isWardenError(await sim({ free: "fail" }).s.impl.free(empty, ctx()).catch((e: unknown) => e), Code.Internal)).toBe(true);
    const ctl = new AbortController();
    const hang = sim({ free: "hang" }).s.impl.free(empty, ctx(ctl.signal)).catch((e: unknown) => e);
    ctl.abort();
    expect(await hang).toBeInstanceOf(Error);
  });

  it("load delay runs on the injected clock", async () => {
    const { s, clock } = sim({ loadDelayMs: 5_000 });
    let done = false;
    const p = s.impl.loadModel(load("a"), ctx()).then(() => (done = true));
    await new Promise((r) => setImmediate(r));
    clock.advance(4_999);
    await new Promise((r) => setImmediate(r));
    expect(done).toBe(false);
    clock.advance(1);
    await p;
    expect(done).toBe(true);
  });

  it("serves the other modalities deterministically and answers the rest UNIMPLEMENTED", async () => {
    const { s } = sim();
    await s.impl.loadModel(load("a"), ctx());
    const e1 = await s.impl.embedding(predict("a"), ctx());
    const e2 = await s.impl.embedding(predict("a"), ctx());
    expect(e1.embeddings).toHaveLength(8);
    expect(e1.embeddings).toEqual(e2.embeddings);
    expect(e1.dim).toBe(8);
    const tok = await s.impl.tokenizeString(create(PredictOptionsSchema, { Prompt: "hé", ModelIdentity: "a" }), ctx());
    expect(tok).toEqual({ length: 3, tokens: [104, 195, 169] });
    expect((await s.impl.detokenize({ $typeName: "backend.DetokenizeRequest", tokens: tok.tokens ?? [] }, ctx())).content).toBe("hé");
    const rr = await s.impl.rerank(create(RerankRequestSchema, { query: "red fox", documents: ["blue sky", "a red fox", "red"], topN: 2, ModelIdentity: "a" }), ctx());
    expect(rr.results?.map((r) => r.index)).toEqual([2, 1]);
    const dir = mkdtempSync(join(tmpdir(), "sim-tts-"));
    try {
      const dst = join(dir, "out.wav");
      expect(await s.impl.tTS(create(TTSRequestSchema, { text: "hi", dst, ModelIdentity: "a" }), ctx())).toEqual({ success: true, message: dst });
      const wav = readFileSync(dst);
      expect(wav.subarray(0, 4).toString()).toBe("RIFF");
      let audio = 0;
      for await (const r of s.impl.tTSStream(create(TTSRequestSchema, { text: "hi", ModelIdentity: "a" }), ctx())) audio += r.audio?.length ?? 0;
      expect(audio).toBe(wav.length - 44);
      const t = await s.impl.audioTranscription(create(TranscriptRequestSchema, { dst, ModelIdentity: "a" }), ctx());
      expect(t.text).toBe(`heard out.wav ${String(wav.length)} bytes`);
      const png = join(dir, "out.png");
      expect(await s.impl.generateImage(create(GenerateImageRequestSchema, { positivePrompt: "cat", width: 3, height: 2, dst: png, ModelIdentity: "a" }), ctx())).toEqual({ success: true, message: png });
      const img = readFileSync(png);
      expect([img.subarray(1, 4).toString(), img.readUInt32BE(16), img.readUInt32BE(20)]).toEqual(["PNG", 3, 2]);
      // A dst the file system refuses is a named error, never INTERNAL, for every modality that writes one (the fuzz test found "\0").
      for (const [bad, code] of [["\0", Code.InvalidArgument], ["x".repeat(4097), Code.InvalidArgument], [join(dir, "no-such-dir", "out.png"), Code.FailedPrecondition], [dir, Code.FailedPrecondition]] as const) {
        for (const call of [() => s.impl.generateImage(create(GenerateImageRequestSchema, { dst: bad, ModelIdentity: "a" }), ctx()), () => s.impl.tTS(create(TTSRequestSchema, { text: "hi", dst: bad, ModelIdentity: "a" }), ctx())]) {
          const err = await call().catch((e: unknown) => e);
          expect(isWardenError(err, code), bad.slice(0, 40)).toBe(true);
          expect((err as WardenError).details.field).toBe("dst");
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    async function* live() {
      yield create(TranscriptLiveRequestSchema, { payload: { case: "config", value: { sampleRate: 16000 } } });
      yield create(TranscriptLiveRequestSchema, { payload: { case: "audio", value: { pcm: [0.1, 0.2] } } });
    }
    const got: unknown[] = [];
    for await (const r of s.impl.audioTranscriptionLive(live(), ctx())) got.push(r);
    expect(got).toEqual([{ ready: true }, { delta: "frame0:2" }, { finalResult: { text: "frame0:2" } }]);
    const un = await s.impl.generateVideo(create(GenerateVideoRequestSchema, {}), ctx()).catch((e: unknown) => e);
    expect(isWardenError(un, Code.Unimplemented)).toBe(true);
    expect((un as WardenError).rawMessage).toBe("method GenerateVideo not implemented");
  });

  it("mismatch_file: answers NOT_FOUND mismatch while the shared count lasts, then serves", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sim-mm-"));
    try {
      const file = join(dir, "count");
      writeFileSync(file, "1");
      const { s } = sim({ mismatchFile: file });
      await s.impl.loadModel(load("a"), ctx());
      const e = await s.impl.predict(predict("a"), ctx()).catch((x: unknown) => x);
      expect((e as WardenError).rawMessage).toBe('backend-sim: model identity mismatch: loaded "a~recycled", requested "a"');
      expect(readFileSync(file, "utf8")).toBe("0");
      expect(text((await s.impl.predict(predict("a"), ctx())).message as Uint8Array)).toMatch(/^a: /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it("parallel:1 serves one prediction at a time (the next waits for the slot); token_delay_ms adds per token", async () => {
    const { s, clock } = sim();
    await s.impl.loadModel(load("a", ["sim.parallel:1", "sim.predict_delay_ms:5", "sim.token_delay_ms:10"]), ctx());
    const done: string[] = [];
    const first = s.impl.predict(predict("a", 2), ctx()).then(() => done.push("first"));
    const second = s.impl.predict(predict("a", 1), ctx()).then(() => done.push("second"));
    const tick = () => new Promise((r) => setImmediate(r));
    await tick();
    expect(s.state().inFlight).toBe(2);
    clock.advance(24); // first needs 5 + 2 × 10 ms
    await tick();
    expect(done).toEqual([]);
    clock.advance(1);
    await tick();
    expect(done).toEqual(["first"]);
    clock.advance(14); // second starts only now, and needs 5 + 1 × 10 ms
    await tick();
    expect(done).toEqual(["first"]);
    clock.advance(1);
    await Promise.all([first, second]);
    expect(done).toEqual(["first", "second"]);
    // a stream holds its slot to the last token: a Predict behind it waits
    const stream = (async () => {
      for await (const r of s.impl.predictStream(predict("a", 2), ctx())) expect(r.tokens).toBeGreaterThan(0);
      done.push("stream");
    })();
    const behind = s.impl.predict(predict("a", 1), ctx()).then(() => done.push("behind"));
    for (let i = 0; i < 2; i++) {
      await tick();
      clock.advance(15); // 5 + 10 ms before each token
    }
    await stream;
    await tick();
    expect(done.slice(2)).toEqual(["stream"]);
    clock.advance(15);
    await behind;
    expect(done.slice(2)).toEqual(["stream", "behind"]);
  });
});
