/**
 * An inference token reaches inference only, not the node's files: a real
 * coordinator process (tokens on, its embedded agent starting real
 * backend-sim processes), called over loopback on its `backend.Backend`
 * data plane with an inference token limited to one model. LocalAI's
 * protocol passes files by path (TTS and GenerateImage write `dst`,
 * AudioTranscription reads it, a prompt cache path is written), so through
 * Warden every such field is refused naming it, before any backend is
 * chosen; the same calls without paths, and the OpenAI HTTP audio routes
 * (which pick their own paths), still work.
 */
import { randomBytes } from "node:crypto";
import { access, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Metadata } from "@grpc/grpc-js";
import { Code, WardenError, wavFile } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, Backend } from "@warden/proto";
import { simSampleRate, simSpeech } from "@warden/backend-sim";
import { randomPortRange, simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, unloadEverything, type CoordinatorProcess } from "./support/coordinator-process.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";
import { freePort } from "./support/free-port.js";

async function failure(p: Promise<unknown>): Promise<WardenError> {
  try {
    await p;
  } catch (err) {
    return WardenError.from(err);
  }
  throw new Error("expected the call to fail");
}

const exists = (path: string): Promise<boolean> =>
  access(path).then(
    () => true,
    () => false,
  );

const naming = (model: string): { metadata: Metadata; timeoutMs: number } => {
  const md = new Metadata();
  md.set("warden-model", model);
  return { metadata: md, timeoutMs: 60_000 };
};

describe("the backend.Backend data plane with an inference token", () => {
  let dir = "";
  /** A directory outside anything Warden owns: where an attacker would aim. */
  let target = "";
  let coord: CoordinatorProcess;
  let tokens: Record<"voice" | "admin", string>;
  let data: Client<typeof Backend>;
  let admin: Client<typeof AdminService>;
  let httpBase = "";
  let inferenceAddress = "";

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-paths-"));
    target = join(tmpdir(), `warden-evil-${randomBytes(6).toString("hex")}`);
    await mkdir(target);
    const t = await writeTokensFile(dir, { voice: { role: "inference", models: ["voice"] }, admin: { role: "admin" } });
    tokens = t.tokens;
    inferenceAddress = `127.0.0.1:${String(await freePort())}`;
    coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
      listen: `127.0.0.1:${String(await freePort())}`,
      inferenceListen: inferenceAddress,
      httpListen: "127.0.0.1:0",
      stateDir: join(dir, "state"),
      auth: { tokensFile: t.path },
      embeddedAgent: true,
      agent: {
        nodeId: "local",
        ports: { ...randomPortRange(), quarantine: "1s" },
        readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" },
        grace: "3s",
        nvidiaSmi: "",
        modelsPath: join(dir, "models"),
        catalog: { "backend-sim": { builtin: "backend-sim" } },
      },
      policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms" },
      stop: { timeout: "10s", rpcTimeout: "8s" },
      recoveryWindow: "500ms",
      models: [simModel("voice"), simModel("other")],
    });
    await mkdir(join(dir, "models"), { recursive: true });
    data = createClient(Backend, inferenceAddress, withToken(tokens.voice));
    admin = createClient(AdminService, coord.address, withToken(tokens.admin));
    httpBase = `http://${coord.httpAddress ?? "none"}`;
  }, 120_000);

  afterAll(async () => {
    data.close();
    admin.close();
    // The backends go before the coordinator (its killed agent would leave them running).
    await unloadEverything(coord.address, withToken(tokens.admin).headers);
    await coord.kill();
    await rm(dir, { recursive: true, force: true });
    await rm(target, { recursive: true, force: true });
  });

  it("TTS with dst at a chosen absolute path writes nothing there, and reaches no backend", async () => {
    const evil = join(target, "evil.wav");
    const err = await failure(data.tTS({ text: "pwned", dst: evil }, naming("voice")));
    expect(err.code).toBe(Code.PermissionDenied);
    expect(err.message).toContain("TTSRequest.dst");
    expect(err.details["field"]).toBe("TTSRequest.dst");
    expect(await exists(evil)).toBe(false);
    // Refused before any lease: "voice" was not even loaded for it.
    expect((await admin.listModels({}, { timeoutMs: 20_000 })).instances.filter((i) => i.model === "voice")).toEqual([]);
    // An admin token is no different on the data plane.
    const asAdmin = createClient(Backend, inferenceAddress, withToken(tokens.admin));
    try {
      expect((await failure(asAdmin.tTS({ text: "pwned", dst: evil }, naming("voice")))).details["field"]).toBe("TTSRequest.dst");
    } finally {
      asAdmin.close();
    }
    expect(await exists(evil)).toBe(false);
  });

  it("a transcription of a file outside the models directory is refused, and its contents never reach the caller", async () => {
    const secret = join(target, "secret.wav");
    await writeFile(secret, wavFile(simSpeech("secret"), simSampleRate));
    const err = await failure(data.audioTranscription({ dst: secret }, naming("voice")));
    expect(err.code).toBe(Code.PermissionDenied);
    expect(err.details["field"]).toBe("TranscriptRequest.dst");
    expect(err.message).not.toContain("heard");
    const streamed = await failure(
      (async () => {
        for await (const _ of data.audioTranscriptionStream({ dst: secret, ModelIdentity: "voice" }, { timeoutMs: 60_000 })) break;
      })(),
    );
    expect(streamed.details["field"]).toBe("TranscriptRequest.dst");
  });

  it("GenerateImage with dst, and a prompt cache path on Predict, are refused; nothing is written", async () => {
    const png = join(target, "evil.png");
    const image = await failure(data.generateImage({ positivePrompt: "x", dst: png }, naming("voice")));
    expect([image.code, image.details["field"]]).toEqual([Code.PermissionDenied, "GenerateImageRequest.dst"]);
    const cache = join(target, "cache.bin");
    const predict = await failure(data.predict({ Prompt: "hi", PromptCachePath: cache }, naming("voice")));
    expect([predict.code, predict.details["field"]]).toEqual([Code.PermissionDenied, "PredictOptions.PromptCachePath"]);
    expect(await exists(png)).toBe(false);
    expect(await exists(cache)).toBe(false);
  });

  it("a streaming request whose config names a file is refused before anything is forwarded; one without still works", async () => {
    const withPath = async function* () {
      yield { payload: { case: "config" as const, value: { sampleRate: simSampleRate, params: { reference: join(target, "secret.wav") } } } };
    };
    const err = await failure(
      (async () => {
        for await (const _ of data.audioTranscriptionLive(withPath(), naming("voice"))) break;
      })(),
    );
    expect([err.code, err.details["field"]]).toEqual([Code.PermissionDenied, "TranscriptLiveConfig.params"]);
    const clean = async function* () {
      yield { payload: { case: "config" as const, value: { sampleRate: simSampleRate, params: { beam: "5" } } } };
      yield { payload: { case: "audio" as const, value: { pcm: [0.5, 0.5] } } };
    };
    let replies = 0;
    for await (const _ of data.audioTranscriptionLive(clean(), naming("voice"))) replies++;
    expect(replies).toBeGreaterThan(0);
    // A later message naming a file ends the call with the refusal, not with the abort it causes.
    const later = async function* () {
      yield { payload: { case: "config" as const, value: { sampleRate: simSampleRate } } };
      yield { payload: { case: "audio" as const, value: { pcm: [0.5] } } };
      yield { payload: { case: "config" as const, value: { sampleRate: simSampleRate, params: { reference: "~/.ssh/id_ed25519" } } } };
    };
    const mid = await failure(
      (async () => {
        for await (const _ of data.audioTranscriptionLive(later(), naming("voice"))) continue;
      })(),
    );
    expect([mid.code, mid.details["field"]]).toEqual([Code.PermissionDenied, "TranscriptLiveConfig.params"]);
  });

  it("the same calls without paths work: Predict, TTSStream's audio over the wire", async () => {
    expect((await data.predict({ Prompt: "hi" }, naming("voice"))).message.length).toBeGreaterThan(0);
    let audio = 0;
    for await (const r of data.tTSStream({ text: "hello", voice: "alloy" }, naming("voice"))) audio += r.audio.length;
    expect(audio).toBe(simSpeech("hello").length);
    // The token's model limit still holds.
    expect((await failure(data.predict({ Prompt: "hi" }, naming("other")))).code).toBe(Code.PermissionDenied);
  });

  it("the OpenAI HTTP audio routes, which choose their own paths, still work with the same token", async () => {
    const auth = { authorization: `Bearer ${tokens.voice}` };
    const speech = await fetch(`${httpBase}/v1/audio/speech`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ model: "voice", input: "hi there", voice: "alloy", response_format: "wav" }) });
    expect(speech.status).toBe(200);
    expect(Buffer.from(await speech.arrayBuffer()).subarray(0, 4).toString("latin1")).toBe("RIFF");
    const voicePath = await fetch(`${httpBase}/v1/audio/speech`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ model: "voice", input: "hi", voice: join(target, "secret.wav") }) });
    expect(voicePath.status).toBe(400);
    expect(((await voicePath.json()) as { error: { param: string } }).error.param).toBe("voice");
    const form = new FormData();
    const clip = wavFile(simSpeech("abc"), simSampleRate);
    form.set("model", "voice");
    form.set("file", new Blob([clip]), "clip.wav");
    const tr = await fetch(`${httpBase}/v1/audio/transcriptions`, { method: "POST", headers: auth, body: form });
    expect(tr.status).toBe(200);
    expect(((await tr.json()) as { text: string }).text).toMatch(new RegExp(`^heard [0-9A-Z]+\\.wav ${String(clip.length)} bytes$`));
    await until("in-flight back to 0", async () => ((await admin.listModels({}, { timeoutMs: 20_000 })).instances.every((i) => i.inFlight === 0) ? true : undefined));
  });
});
