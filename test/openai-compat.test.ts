/**
 * Where an OpenAI client could tell Warden from OpenAI, against a real
 * coordinator (auth on, embedded agent, real backend-sim processes), each
 * point through two client libraries: the official `openai` client and the
 * Vercel AI SDK (`ai` with `@ai-sdk/openai`, its chat model on
 * /v1/chat/completions), which shows an error as its APICallError: the
 * status and the body's `error.message`, nothing else. Points: chat and
 * streamed chat with usage, embeddings, errors in OpenAI's shape (`type`,
 * `code` from OpenAI's set, the field named in the message),
 * `GET /v1/models/{id}`, a real `created`, `dimensions` on embeddings
 * checked, speech's WAV default and its refusal of compressed formats. What
 * no client library sends (a body without a required field, an unknown
 * route, `GET /v1/models/{id}`'s `warden` field) is checked over plain HTTP.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import OpenAI from "openai";
import { APICallError, embed, embedMany, experimental_generateSpeech as generateSpeech, generateText, streamText } from "ai";
import { createOpenAI, type OpenAIProvider } from "@ai-sdk/openai";
import { simEmbeddingDim } from "@warden/backend-sim";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { writeTokensFile } from "./support/auth-tokens.js";

/** Every `code` OpenAI's API sends that Warden uses; anything else (an internal code name) fails. */
const openAiCodes = new Set([null, "model_not_found", "missing_required_parameter", "invalid_api_key", "rate_limit_exceeded"]);

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await p;
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err;
    throw err;
  }
  throw new Error("expected an API error");
}

interface ErrorJson {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** The Vercel AI SDK's error for a refused call, with the OpenAI error body its provider parsed into `data`. */
async function sdkErrorOf(p: Promise<unknown>): Promise<APICallError & { data: ErrorJson }> {
  try {
    await p;
  } catch (err) {
    if (APICallError.isInstance(err)) return err as APICallError & { data: ErrorJson };
    throw err;
  }
  throw new Error("expected an APICallError");
}

/** What a refused SDK call shows and what its body said, in one comparable shape. */
const seen = (e: APICallError & { data: ErrorJson }): unknown => ({ status: e.statusCode, type: e.data.error.type, code: e.data.error.code, param: e.data.error.param, shown: e.message });

/** Plain HTTP for what no client library sends. */
async function wire(base: string, token: string, method: "GET" | "POST", path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: await res.json() };
}

describe("OpenAI compatibility: the official client and the Vercel AI SDK", () => {
  let dir: string;
  let tc: TestCoordinator;
  let base: string;
  let tokens: Record<"inference" | "wordsOnly" | "viewer", string>;
  let client: OpenAI;
  let sdk: OpenAIProvider;
  let startedSec: number;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-openai-compat-"));
    const t = await writeTokensFile(dir, { inference: { role: "inference" }, wordsOnly: { role: "inference", models: ["words"] }, viewer: { role: "viewer" } });
    tokens = t.tokens;
    startedSec = Math.floor(Date.now() / 1000);
    tc = await startTestCoordinator({
      models: [simModel("words", { knobs: { predict_tokens: 3 } }), simModel("echo", { knobs: { echo: true } })],
      extra: { httpListen: "127.0.0.1:0", auth: { tokensFile: t.path } },
    });
    base = `http://${tc.c.httpAddress ?? "none"}/v1`;
    client = new OpenAI({ baseURL: base, apiKey: tokens.inference, maxRetries: 0, timeout: 60_000 });
    sdk = createOpenAI({ baseURL: base, apiKey: tokens.inference });
  }, 120_000);
  afterAll(async () => {
    await tc.close();
    await rm(dir, { recursive: true, force: true });
  });

  describe("chat, streamed chat and embeddings through the Vercel AI SDK", () => {
    it("generateText: the backend's answer and usage; the SDK's system prompt and call settings reach the backend as sent", async () => {
      const r = await generateText({ model: sdk.chat("words"), prompt: "hi", maxRetries: 0 });
      // backend-sim answers "<model>: w0 w1 …" (predict_tokens 3) and counts the messages' characters as prompt tokens.
      expect([r.text, r.finishReason, r.response.modelId]).toEqual(["words: w0 w1 w2", "stop", "words"]);
      expect(r.usage).toMatchObject({ inputTokens: 2, outputTokens: 3, totalTokens: 5 });
      const cut = await generateText({ model: sdk.chat("words"), prompt: "hi", maxOutputTokens: 2, maxRetries: 0 });
      expect([cut.text, cut.finishReason, cut.usage.outputTokens]).toEqual(["words: w0 w1", "length", 2]);

      // The echo model answers with what Warden put in the backend call.
      const echo = await generateText({ model: sdk.chat("echo"), system: "be brief", prompt: "hi", temperature: 0.5, maxOutputTokens: 7, stopSequences: ["w9"], seed: 11, maxRetries: 0 });
      expect(echo.text.startsWith("echo: ")).toBe(true);
      expect(JSON.parse(echo.text.slice("echo: ".length))).toMatchObject({
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: "hi" },
        ],
        tokens: 7,
        temperature: 0.5,
        stop: ["w9"],
        seed: 11,
      });
    });

    it("streamText: the text arrives in several deltas that add up to the answer, with usage (the SDK asks for it with stream_options) and the finish reason", async () => {
      const r = streamText({ model: sdk.chat("words"), prompt: "hi", maxRetries: 0 });
      const deltas: string[] = [];
      for await (const d of r.textStream) deltas.push(d);
      expect(deltas.length).toBeGreaterThan(1);
      expect(deltas.join("")).toBe("words: w0 w1 w2");
      expect(await r.text).toBe("words: w0 w1 w2");
      expect(await r.finishReason).toBe("stop");
      expect(await r.usage).toMatchObject({ inputTokens: 2, outputTokens: 3, totalTokens: 5 });
      const cut = streamText({ model: sdk.chat("words"), prompt: "hi", maxOutputTokens: 1, maxRetries: 0 });
      expect([await cut.text, await cut.finishReason]).toEqual(["words: w0", "length"]);
    });

    it("embed and embedMany: the model's vectors, the same as the official client gets, with usage", async () => {
      const one = await embed({ model: sdk.embedding("words"), value: "hello world", maxRetries: 0 });
      expect(one.embedding).toHaveLength(simEmbeddingDim);
      expect(one.usage.tokens).toBe(2);
      const official = await client.embeddings.create({ model: "words", input: "hello world" });
      expect(one.embedding).toEqual(official.data[0]?.embedding);
      const many = await embedMany({ model: sdk.embedding("words"), values: ["hello world", "other"], maxRetries: 0 });
      expect(many.embeddings[0]).toEqual(one.embedding);
      expect(many.embeddings[1]).not.toEqual(one.embedding);
    });

    it("the provider's default model speaks the Responses API, which Warden does not serve: the 404 names the route (use sdk.chat)", async () => {
      const e = await sdkErrorOf(generateText({ model: sdk("words"), prompt: "hi", maxRetries: 0 }));
      expect(seen(e)).toEqual({ status: 404, type: "invalid_request_error", code: null, param: "url", shown: "url: no route for POST /v1/responses" });
    });
  });

  describe("errors in OpenAI's shape", () => {
    it("official client: unknown model 404 invalid_request_error/model_not_found; a missing or bad field names itself in the message; auth as OpenAI answers it", async () => {
      const unknown = await errorOf(client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }));
      expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
      expect([unknown.status, unknown.type, unknown.code, unknown.param]).toEqual([404, "invalid_request_error", "model_not_found", "model"]);
      expect(unknown.message).toContain('model: "gpt-4o" is not configured');

      // The message alone (what LangChain shows) names the field: before, "400 is required".
      const noModel = await errorOf(client.chat.completions.create({ messages: [{ role: "user", content: "x" }] } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming));
      expect([noModel.status, noModel.type, noModel.code, noModel.param]).toEqual([400, "invalid_request_error", "missing_required_parameter", "model"]);
      expect(noModel.message).toBe("400 model: is required");
      const noMessages = await errorOf(client.chat.completions.create({ model: "words" } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming));
      expect([noMessages.code, noMessages.param, noMessages.message]).toEqual(["missing_required_parameter", "messages", "400 messages: is required"]);
      const noRole = await errorOf(client.chat.completions.create({ model: "words", messages: [{ content: "x" } as unknown as OpenAI.ChatCompletionMessageParam] }));
      expect([noRole.code, noRole.message]).toEqual(["missing_required_parameter", "400 messages[0].role: is required"]);
      const temp = await errorOf(client.chat.completions.create({ model: "words", messages: [{ role: "user", content: "x" }], temperature: 5 }));
      expect([temp.status, temp.type, temp.code, temp.param]).toEqual([400, "invalid_request_error", null, "temperature"]);
      expect(temp.message).toMatch(/^400 temperature: must be in \[0, 2\]/);

      // A wrong key: OpenAI's own answer (type invalid_request_error, code invalid_api_key); the client classes it by status.
      const wrongKey = await errorOf(new OpenAI({ baseURL: base, apiKey: "wdn_not-a-token", maxRetries: 0 }).models.list());
      expect(wrongKey).toBeInstanceOf(OpenAI.AuthenticationError);
      expect([wrongKey.status, wrongKey.type, wrongKey.code]).toEqual([401, "invalid_request_error", "invalid_api_key"]);
      // A token without access to the model: 403 model_not_found, as OpenAI answers a project without access.
      const narrow = new OpenAI({ baseURL: base, apiKey: tokens.wordsOnly, maxRetries: 0 });
      const noAccess = await errorOf(narrow.chat.completions.create({ model: "echo", messages: [{ role: "user", content: "x" }] }));
      expect(noAccess).toBeInstanceOf(OpenAI.PermissionDeniedError);
      expect([noAccess.status, noAccess.type, noAccess.code, noAccess.param]).toEqual([403, "invalid_request_error", "model_not_found", "model"]);
      const viewer = await errorOf(new OpenAI({ baseURL: base, apiKey: tokens.viewer, maxRetries: 0 }).models.list());
      expect([viewer.status, viewer.type, viewer.code]).toEqual([403, "invalid_request_error", null]);
      for (const e of [unknown, noModel, noMessages, noRole, temp, wrongKey, noAccess, viewer]) expect(openAiCodes.has(e.code as string | null), String(e.code)).toBe(true);
    });

    it("Vercel AI SDK: an unknown model, a bad field, an image part, a wrong key or a token without access is an APICallError with the status and the message naming the field", async () => {
      const unknown = await sdkErrorOf(generateText({ model: sdk.chat("gpt-4o"), prompt: "x", maxRetries: 0 }));
      expect(seen(unknown)).toEqual({ status: 404, type: "invalid_request_error", code: "model_not_found", param: "model", shown: 'model: "gpt-4o" is not configured (GET /v1/models lists the models)' });
      expect(unknown.isRetryable).toBe(false);
      // Streamed, the refusal comes before the stream starts: a JSON error with its status, which the SDK raises as the stream's error part.
      const streamed: unknown[] = [];
      for await (const part of streamText({ model: sdk.chat("gpt-4o"), prompt: "x", maxRetries: 0, onError: () => undefined }).fullStream) if (part.type === "error") streamed.push(part.error);
      expect(streamed).toHaveLength(1);
      expect(APICallError.isInstance(streamed[0]) && seen(streamed[0] as APICallError & { data: ErrorJson })).toEqual(seen(unknown));

      const temp = await sdkErrorOf(generateText({ model: sdk.chat("words"), prompt: "x", temperature: 5, maxRetries: 0 }));
      expect(seen(temp)).toMatchObject({ status: 400, type: "invalid_request_error", code: null, param: "temperature" });
      expect(temp.message).toMatch(/^temperature: must be in \[0, 2\]/);
      // The SDK sends an image as an image_url content part; Warden's chat takes text parts only and says which part.
      const image = await sdkErrorOf(generateText({ model: sdk.chat("words"), messages: [{ role: "user", content: [{ type: "image", image: new Uint8Array([137, 80, 78, 71]), mediaType: "image/png" }] }], maxRetries: 0 }));
      expect(seen(image)).toEqual({ status: 400, type: "invalid_request_error", code: null, param: "messages[0].content[0].type", shown: 'messages[0].content[0].type: only "text" parts are supported, got "image_url"' });

      const wrongKey = await sdkErrorOf(generateText({ model: createOpenAI({ baseURL: base, apiKey: "wdn_not-a-token" }).chat("words"), prompt: "x", maxRetries: 0 }));
      expect(seen(wrongKey)).toMatchObject({ status: 401, type: "invalid_request_error", code: "invalid_api_key" });
      const noAccess = await sdkErrorOf(generateText({ model: createOpenAI({ baseURL: base, apiKey: tokens.wordsOnly }).chat("echo"), prompt: "x", maxRetries: 0 }));
      expect(seen(noAccess)).toMatchObject({ status: 403, type: "invalid_request_error", code: "model_not_found", param: "model" });
      expect(noAccess.message).toMatch(/^model: /);
      for (const e of [unknown, temp, image, wrongKey, noAccess]) {
        expect(openAiCodes.has(e.data.error.code), String(e.data.error.code)).toBe(true);
        expect(Object.keys((JSON.parse(e.responseBody ?? "{}") as ErrorJson).error).sort()).toEqual(["code", "message", "param", "type"]);
      }
    });

    it("plain HTTP, for bodies no client library builds: the message names the field; every body is {error:{message,type,param,code}} with OpenAI's codes", async () => {
      const cases: [string, "GET" | "POST", string, unknown, number, string | null, string][] = [
        ["no messages", "POST", "/chat/completions", { model: "words" }, 400, "missing_required_parameter", "messages: is required"],
        ["no input", "POST", "/embeddings", { model: "words", encoding_format: "float" }, 400, "missing_required_parameter", "input: is required"],
        ["no prompt", "POST", "/images/generations", { model: "words" }, 400, "missing_required_parameter", "prompt: is required"],
        ["unknown route", "GET", "/nope", undefined, 404, null, "url: no route for GET /v1/nope"],
      ];
      for (const [what, method, path, body, status, code, shown] of cases) {
        const r = await wire(base, tokens.inference, method, path, body);
        const e = (r.json as ErrorJson).error;
        expect({ what, status: r.status, code: e.code, type: e.type, shown: e.message.slice(0, shown.length) }).toEqual({ what, status, code, type: "invalid_request_error", shown });
        expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"]);
      }
    });
  });

  describe("GET /v1/models/{id}", () => {
    it("official client: models.retrieve answers the model object; an unknown id, or one the token may not use, is 404 model_not_found", async () => {
      const m = await client.models.retrieve("words");
      expect(m).toMatchObject({ id: "words", object: "model", owned_by: "warden" });
      const listed = (await client.models.list()).data.find((x) => x.id === "words");
      expect(m.created).toBe(listed?.created);
      for (const [c, id] of [
        [client, "gpt-4o"],
        [client, "org/name"],
        [new OpenAI({ baseURL: base, apiKey: tokens.wordsOnly, maxRetries: 0 }), "echo"],
      ] as const) {
        const e = await errorOf(c.models.retrieve(id));
        expect(e).toBeInstanceOf(OpenAI.NotFoundError);
        expect([id, e.type, e.code, e.param]).toEqual([id, "invalid_request_error", "model_not_found", "model"]);
      }
      // The narrow token sees its own model, as in its list.
      expect((await new OpenAI({ baseURL: base, apiKey: tokens.wordsOnly, maxRetries: 0 }).models.retrieve("words")).id).toBe("words");
    });

    it("plain HTTP (no client library reads it): GET /v1/models/{id} as JSON, with the warden field of the list", async () => {
      const r = await wire(base, tokens.inference, "GET", "/models/echo");
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({ id: "echo", object: "model", warden: { backend: "backend-sim", state: expect.any(String) as unknown } });
      const gone = await wire(base, tokens.inference, "GET", "/models/nope");
      expect([gone.status, (gone.json as ErrorJson).error.code, (gone.json as ErrorJson).error.message]).toEqual([404, "model_not_found", 'model: "nope" is not configured (GET /v1/models lists the models)']);
    });
  });

  describe("created", () => {
    it("official client: a model's is when this coordinator first saw it, stable across calls; a completion's is the request's time", async () => {
      const first = await client.models.list();
      const nowSec = Math.floor(Date.now() / 1000);
      for (const m of first.data) {
        expect(m.created, m.id).toBeGreaterThanOrEqual(startedSec);
        expect(m.created, m.id).toBeLessThanOrEqual(nowSec);
      }
      expect((await client.models.list()).data.map((m) => m.created)).toEqual(first.data.map((m) => m.created));
      const before = Math.floor(Date.now() / 1000);
      const chat = await client.chat.completions.create({ model: "words", messages: [{ role: "user", content: "hi" }] });
      const done = await client.completions.create({ model: "words", prompt: "hi" });
      const after = Math.floor(Date.now() / 1000);
      for (const c of [chat.created, done.created]) {
        expect(c).toBeGreaterThanOrEqual(before);
        expect(c).toBeLessThanOrEqual(after);
      }
    });

    it("Vercel AI SDK: a chat answer's created, read as response.timestamp, is the request's time", async () => {
      const before = Math.floor(Date.now() / 1000);
      const r = await generateText({ model: sdk.chat("words"), prompt: "hi", maxRetries: 0 });
      const after = Math.floor(Date.now() / 1000);
      // Read from the answer's created (whole seconds), not the SDK's own clock, which it falls back to when created is missing or 0.
      const sec = r.response.timestamp.getTime() / 1000;
      expect(sec).toBe((r.response.body as { created: number }).created);
      expect(sec).toBeGreaterThanOrEqual(before);
      expect(sec).toBeLessThanOrEqual(after);
    });
  });

  describe("dimensions on embeddings", () => {
    it("official client: the model's own length is accepted; another is 400 naming dimensions and the length (never cut, never ignored)", async () => {
      const ok = await client.embeddings.create({ model: "words", input: "hello", dimensions: simEmbeddingDim });
      expect(ok.data[0]?.embedding).toHaveLength(simEmbeddingDim);
      const e = await errorOf(client.embeddings.create({ model: "words", input: "hello", dimensions: simEmbeddingDim - 1 }));
      expect([e.status, e.type, e.code, e.param]).toEqual([400, "invalid_request_error", null, "dimensions"]);
      expect(e.message).toContain(`makes ${String(simEmbeddingDim)}-dimensional vectors`);
      const bad = await errorOf(client.embeddings.create({ model: "words", input: "hello", dimensions: 0 }));
      expect([bad.status, bad.param]).toEqual([400, "dimensions"]);
    });

    it("Vercel AI SDK: providerOptions.openai.dimensions (sent with encoding_format float) of the model's length is accepted; another is an APICallError naming dimensions", async () => {
      const ok = await embedMany({ model: sdk.embedding("words"), values: ["a", "b"], providerOptions: { openai: { dimensions: simEmbeddingDim } }, maxRetries: 0 });
      expect(ok.embeddings.map((v) => v.length)).toEqual([simEmbeddingDim, simEmbeddingDim]);
      const cut = await sdkErrorOf(embedMany({ model: sdk.embedding("words"), values: ["a", "b"], providerOptions: { openai: { dimensions: 4 } }, maxRetries: 0 }));
      expect(seen(cut)).toMatchObject({ status: 400, type: "invalid_request_error", code: null, param: "dimensions" });
      expect(cut.message).toMatch(/^dimensions: model "words" makes 8-dimensional vectors/);
    });
  });

  describe("speech's format", () => {
    it("official client: without response_format the answer is WAV, said so by its content type; mp3 is refused naming response_format", async () => {
      const res = await client.audio.speech.create({ model: "words", voice: "alloy", input: "hi there" });
      expect(res.headers.get("content-type")).toBe("audio/wav");
      expect(Buffer.from(await res.arrayBuffer()).subarray(0, 4).toString("latin1")).toBe("RIFF");
      for (const format of ["mp3", "opus", "aac", "flac"] as const) {
        const e = await errorOf(client.audio.speech.create({ model: "words", voice: "alloy", input: "hi", response_format: format }));
        expect([format, e.status, e.type, e.param]).toEqual([format, 400, "invalid_request_error", "response_format"]);
        expect(e.message).toContain(`"${format}" needs an audio encoder Warden does not carry`);
      }
    });

    it("Vercel AI SDK: its speech default (mp3) is refused with a message that says what to send; outputFormat wav is answered", async () => {
      const e = await sdkErrorOf(generateSpeech({ model: sdk.speech("words"), text: "hi", voice: "alloy", maxRetries: 0 }));
      expect(seen(e)).toEqual({
        status: 400,
        type: "invalid_request_error",
        code: null,
        param: "response_format",
        shown: 'response_format: "mp3" needs an audio encoder Warden does not carry: ask for "wav" (the default here, where OpenAI\'s is "mp3") or "pcm"',
      });
      const wav = await generateSpeech({ model: sdk.speech("words"), text: "hi", voice: "alloy", outputFormat: "wav", maxRetries: 0 });
      expect(Buffer.from(wav.audio.uint8Array).subarray(0, 4).toString("latin1")).toBe("RIFF");
      expect(wav.audio.mediaType).toBe("audio/wav");
    });
  });
});
