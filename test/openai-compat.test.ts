/**
 * Where an OpenAI client could tell Warden from OpenAI, against a real
 * coordinator (auth on, embedded agent, real backend-sim processes), each
 * point through the official `openai` client and through a second client: a
 * plain `fetch` client that sends what the Vercel AI SDK's and LangChain's
 * OpenAI providers send and, as they do, shows the error's message alone
 * (neither library is installed here). Points: errors in OpenAI's shape
 * (`type`, `code` from OpenAI's set, the field named in the message),
 * `GET /v1/models/{id}`, a real `created`, `dimensions` on embeddings checked,
 * speech's WAV default and its refusal of compressed formats.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import OpenAI from "openai";
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

/**
 * The second client: requests as the Vercel AI SDK's OpenAI provider builds
 * them (bearer token, JSON body, `encoding_format: "float"`, speech with its
 * `response_format`), and its error as APICallError shows it: the body's
 * `error.message`, nothing else.
 */
class FetchClient {
  constructor(
    private readonly base: string,
    private readonly token: string,
  ) {}

  async call(method: "GET" | "POST", path: string, body?: unknown): Promise<{ status: number; json: unknown; shown: string | undefined; headers: Headers; bytes: Buffer }> {
    const res = await fetch(`${this.base}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    const isJson = res.headers.get("content-type")?.includes("application/json") === true;
    const json: unknown = isJson ? JSON.parse(bytes.toString("utf8")) : undefined;
    const shown = res.ok ? undefined : (json as ErrorJson | undefined)?.error.message;
    return { status: res.status, json, shown, headers: res.headers, bytes };
  }
}

describe("OpenAI compatibility: the official client and a second one", () => {
  let dir: string;
  let tc: TestCoordinator;
  let base: string;
  let tokens: Record<"inference" | "wordsOnly" | "viewer", string>;
  let client: OpenAI;
  let second: FetchClient;
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
    second = new FetchClient(base, tokens.inference);
  }, 120_000);
  afterAll(async () => {
    await tc.close();
    await rm(dir, { recursive: true, force: true });
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

    it("second client: the message it shows names the field; every body is {error:{message,type,param,code}} with OpenAI's codes", async () => {
      const cases: [string, "GET" | "POST", string, unknown, number, string | null, string][] = [
        ["no messages", "POST", "/chat/completions", { model: "words" }, 400, "missing_required_parameter", "messages: is required"],
        ["unknown model", "POST", "/chat/completions", { model: "gpt-4o", messages: [{ role: "user", content: "x" }] }, 404, "model_not_found", 'model: "gpt-4o" is not configured'],
        ["no input", "POST", "/embeddings", { model: "words", encoding_format: "float" }, 400, "missing_required_parameter", "input: is required"],
        ["no prompt", "POST", "/images/generations", { model: "words" }, 400, "missing_required_parameter", "prompt: is required"],
        ["bad content part", "POST", "/chat/completions", { model: "words", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, 400, null, "messages[0].content[0].type: "],
        ["unknown route", "GET", "/nope", undefined, 404, null, "url: no route for GET /v1/nope"],
      ];
      for (const [what, method, path, body, status, code, shown] of cases) {
        const r = await second.call(method, path, body);
        expect({ what, status: r.status, code: (r.json as ErrorJson).error.code, type: (r.json as ErrorJson).error.type, shown: r.shown?.slice(0, shown.length) }).toEqual({ what, status, code, type: "invalid_request_error", shown });
        expect(Object.keys((r.json as ErrorJson).error).sort()).toEqual(["code", "message", "param", "type"]);
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

    it("second client: GET /v1/models/{id} as JSON, with the warden field of the list", async () => {
      const r = await second.call("GET", "/models/echo");
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({ id: "echo", object: "model", warden: { backend: "backend-sim", state: expect.any(String) as unknown } });
      const gone = await second.call("GET", "/models/nope");
      expect([gone.status, (gone.json as ErrorJson).error.code, gone.shown]).toEqual([404, "model_not_found", 'model: "nope" is not configured (GET /v1/models lists the models)']);
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

    it("second client: the models list and a chat answer carry real seconds", async () => {
      const list = (await second.call("GET", "/models")).json as { data: { created: number }[] };
      expect(list.data.every((m) => m.created >= startedSec)).toBe(true);
      const before = Math.floor(Date.now() / 1000);
      const chat = (await second.call("POST", "/chat/completions", { model: "words", messages: [{ role: "user", content: "hi" }] })).json as { created: number };
      expect(chat.created).toBeGreaterThanOrEqual(before);
      expect(chat.created).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
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

    it("second client: dimensions as the Vercel AI SDK sends it (with encoding_format float)", async () => {
      const ok = await second.call("POST", "/embeddings", { model: "words", input: ["a", "b"], encoding_format: "float", dimensions: simEmbeddingDim });
      expect((ok.json as { data: { embedding: number[] }[] }).data.map((d) => d.embedding.length)).toEqual([simEmbeddingDim, simEmbeddingDim]);
      const cut = await second.call("POST", "/embeddings", { model: "words", input: ["a", "b"], encoding_format: "float", dimensions: 4 });
      expect(cut.status).toBe(400);
      expect(cut.shown).toMatch(/^dimensions: model "words" makes 8-dimensional vectors/);
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

    it("second client: response_format mp3 (a common client default) is refused with a message that says what to send", async () => {
      const r = await second.call("POST", "/audio/speech", { model: "words", input: "hi", voice: "alloy", response_format: "mp3" });
      expect(r.status).toBe(400);
      expect(r.shown).toBe('response_format: "mp3" needs an audio encoder Warden does not carry: ask for "wav" (the default here, where OpenAI\'s is "mp3") or "pcm"');
      const wav = await second.call("POST", "/audio/speech", { model: "words", input: "hi", voice: "alloy" });
      expect([wav.status, wav.headers.get("content-type"), wav.bytes.subarray(0, 4).toString("latin1")]).toEqual([200, "audio/wav", "RIFF"]);
    });
  });
});
