/**
 * The OpenAI-compatible API through the official `openai` client against a
 * real coordinator (embedded agent, real backend-sim processes): chat plain
 * and streamed (messages with UseTokenizerTemplate, or a model's prompt
 * template), completions, embeddings, speech (TTSStream and the TTS file
 * fallback), transcription, images; a stream the client abandons leaves
 * in-flight at 0 in Admin ListModels; errors come in OpenAI's shape with
 * the right status and the field in `param`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import OpenAI, { toFile } from "openai";
import { wavFile } from "@warden/common";
import { simEmbedding, simSampleRate, simSpeech } from "@warden/backend-sim";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

interface Echo {
  prompt: string;
  messages: { role: string; content: string; name?: string }[];
  useTokenizerTemplate: boolean;
  tokens: number;
  temperature: number;
  topP: number;
  topK: number;
  seed: number;
  stop: string[];
  tools: string;
}

/** The sim's echo answer: "<model>: {json}". */
function echoOf(content: string | null | undefined, model: string): Echo {
  expect(content?.startsWith(`${model}: `)).toBe(true);
  return JSON.parse((content ?? "").slice(model.length + 2)) as Echo;
}

async function inFlightOf(tc: TestCoordinator, model: string): Promise<number | undefined> {
  const r = await tc.admin.listModels({}, { timeoutMs: 10_000 });
  const i = r.instances.filter((x) => x.model === model);
  return i.length === 0 ? undefined : i.reduce((n, x) => n + x.inFlight, 0);
}

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await p;
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err;
    throw err;
  }
  throw new Error("expected an API error");
}

describe("OpenAI-compatible API (official client)", () => {
  let tc: TestCoordinator;
  let client: OpenAI;
  let base: string;

  beforeAll(async () => {
    tc = await startTestCoordinator({
      models: [
        simModel("echo", { knobs: { echo: true } }),
        { ...simModel("templated", { knobs: { echo: true } }), promptTemplate: { prefix: "<s>", message: "[{{role}}] {{content}}\n", generation: "[assistant]" } },
        simModel("words", { knobs: { predict_tokens: 5 } }),
        simModel("slow", { knobs: { predict_delay_ms: 50, predict_tokens: 100_000 } }),
        simModel("tts-only", { knobs: { tts_stream: false } }),
        simModel("broken", { knobs: { fail_load: "no weights here" } }),
        simModel("nowhere", { selector: { zone: "mars" } }),
      ],
      // Few placement retries: "no node can take it" is answered in about a second.
      policy: { enforcementRetries: 4 },
      extra: { httpListen: "127.0.0.1:0" },
    });
    base = `http://${tc.c.httpAddress ?? "none"}/v1`;
    client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
  });
  afterAll(async () => {
    await tc.close();
  });

  it("chat: messages go to the backend with UseTokenizerTemplate, with every sampling field, and usage counts come back", async () => {
    // seed is deprecated in the client's types (beta upstream) but sent as LocalAI clients send it.
    const beta = { seed: 42 };
    const r = await client.chat.completions.create({
      model: "echo",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: [{ type: "text", text: "hello " }, { type: "text", text: "there" }], name: "ann" },
      ],
      max_completion_tokens: 7,
      temperature: 0.5,
      top_p: 0.25,
      ...beta,
      stop: ["END", "STOP"],
    });
    expect(r.object).toBe("chat.completion");
    expect(r.model).toBe("echo");
    const e = echoOf(r.choices[0]?.message.content, "echo");
    expect(e.messages).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "hello there", name: "ann" },
    ]);
    expect([e.useTokenizerTemplate, e.prompt, e.tokens, e.seed, e.stop]).toEqual([true, "", 7, 42, ["END", "STOP"]]);
    expect(e.temperature).toBeCloseTo(0.5, 5);
    expect(e.topP).toBeCloseTo(0.25, 5);
    expect(r.usage).toEqual({ prompt_tokens: "be brief".length + "hello there".length, completion_tokens: 1, total_tokens: 20 });
  });

  it("chat: a model with a promptTemplate gets the rendered prompt instead of the messages; absent sampling fields get LocalAI's defaults", async () => {
    const r = await client.chat.completions.create({ model: "templated", messages: [{ role: "system", content: "sys" }, { role: "user", content: "hi" }] });
    const e = echoOf(r.choices[0]?.message.content, "templated");
    expect([e.prompt, e.messages, e.useTokenizerTemplate]).toEqual(["<s>[system] sys\n[user] hi\n[assistant]", [], false]);
    expect([e.tokens, e.seed, e.topK]).toEqual([0, -1, 40]);
    expect(e.temperature).toBeCloseTo(0.9, 5);
    expect(e.topP).toBeCloseTo(0.95, 5);
  });

  it("chat streamed: server-sent chunks that concatenate to the answer, a finish reason, usage, then [DONE]", async () => {
    const stream = await client.chat.completions.create({ model: "words", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } });
    let text = "";
    const finish: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? "";
      if (c.choices[0]?.finish_reason != null) finish.push(c.choices[0].finish_reason);
      if (c.usage != null) usage = c.usage;
    }
    expect(text).toBe("words: w0 w1 w2 w3 w4");
    expect(finish).toEqual(["stop"]);
    expect(usage).toEqual({ prompt_tokens: 2, completion_tokens: 5, total_tokens: 7 });
    // The raw stream ends with the [DONE] sentinel.
    const raw = await fetch(`${base}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "words", messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 2 }) });
    expect(raw.headers.get("content-type")).toContain("text/event-stream");
    const body = await raw.text();
    expect(body.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(body).toContain('"finish_reason":"length"');
  });

  it("chat: stop sequences reach the backend (the sim stops before the word)", async () => {
    const r = await client.chat.completions.create({ model: "words", messages: [{ role: "user", content: "hi" }], stop: "w3" });
    expect(r.choices[0]?.message.content).toBe("words: w0 w1 w2");
    expect(r.usage?.completion_tokens).toBe(3);
  });

  it("completions: plain, a list of prompts, and streamed", async () => {
    const r = await client.completions.create({ model: "words", prompt: "hello", max_tokens: 3 });
    expect(r.choices.map((c) => [c.text, c.finish_reason])).toEqual([["words: w0 w1 w2", "length"]]);
    expect(r.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
    const two = await client.completions.create({ model: "words", prompt: ["a", "bb"], max_tokens: 1 });
    expect(two.choices.map((c) => [c.index, c.text])).toEqual([
      [0, "words: w0"],
      [1, "words: w0"],
    ]);
    expect(two.usage?.prompt_tokens).toBe(3);
    const stream = await client.completions.create({ model: "words", prompt: "hello", stream: true });
    let text = "";
    for await (const c of stream) text += c.choices[0]?.text ?? "";
    expect(text).toBe("words: w0 w1 w2 w3 w4");
  });

  it("embeddings: one vector per input, base64 (the client's default) and float", async () => {
    const r = await client.embeddings.create({ model: "words", input: ["hello", "world"] });
    expect(r.data.map((d) => d.index)).toEqual([0, 1]);
    for (const [i, text] of ["hello", "world"].entries()) {
      const want = simEmbedding(text);
      const got = r.data[i]?.embedding ?? [];
      expect(got).toHaveLength(want.length);
      got.forEach((x, j) => {
        expect(x).toBeCloseTo(want[j] ?? NaN, 5);
      });
    }
    const f = (await (await fetch(`${base}/embeddings`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "words", input: "hello", encoding_format: "float" }) })).json()) as { data: { embedding: number[] }[] };
    expect(f.data[0]?.embedding.map((x) => Math.round(x * 1000))).toEqual(simEmbedding("hello").map((x) => Math.round(x * 1000)));
  });

  it("speech: a WAV from TTSStream, and the same from a backend with TTS only (its file read back)", async () => {
    const want = wavFile(simSpeech("hi there"), simSampleRate);
    const streamed = Buffer.from(await (await client.audio.speech.create({ model: "words", voice: "alloy", input: "hi there", response_format: "wav" })).arrayBuffer());
    expect(streamed.equals(want)).toBe(true);
    const file = Buffer.from(await (await client.audio.speech.create({ model: "tts-only", voice: "alloy", input: "hi there", response_format: "wav" })).arrayBuffer());
    expect(file.equals(want)).toBe(true);
    const pcm = Buffer.from(await (await client.audio.speech.create({ model: "words", voice: "alloy", input: "hi there", response_format: "pcm" })).arrayBuffer());
    expect(pcm.equals(Buffer.from(simSpeech("hi there")))).toBe(true);
  });

  it("transcription: the upload reaches the backend as a file (the sim hears its size)", async () => {
    const audio = wavFile(simSpeech("abc"), simSampleRate);
    const r = await client.audio.transcriptions.create({ model: "words", file: await toFile(audio, "clip.wav"), language: "de" });
    expect(r.text).toMatch(new RegExp(`^heard [0-9A-Z]+\\.wav ${String(audio.length)} bytes$`));
    const v = await client.audio.transcriptions.create({ model: "words", file: await toFile(audio, "clip.wav"), response_format: "verbose_json" });
    expect(v.language).toBe("en");
  });

  it("images: n PNGs of the requested size as b64_json", async () => {
    const r = await client.images.generate({ model: "words", prompt: "a red square", size: "256x512", n: 2 });
    expect(r.data).toHaveLength(2);
    for (const d of r.data ?? []) {
      const png = Buffer.from(d.b64_json ?? "", "base64");
      expect(png.subarray(1, 4).toString("latin1")).toBe("PNG");
      expect([png.readUInt32BE(16), png.readUInt32BE(20)]).toEqual([256, 512]);
    }
  });

  it("a stream the client abandons cancels the backend call: in-flight goes back to 0", async () => {
    const ctl = new AbortController();
    const stream = await client.chat.completions.create({ model: "slow", messages: [{ role: "user", content: "go" }], stream: true }, { signal: ctl.signal });
    let chunks = 0;
    let busySeen = false;
    try {
      for await (const _ of stream) {
        chunks++;
        if (chunks === 3) {
          busySeen = (await inFlightOf(tc, "slow")) === 1;
          ctl.abort();
        }
      }
    } catch (err) {
      expect(ctl.signal.aborted, String(err)).toBe(true);
    }
    expect(busySeen).toBe(true);
    await until("in-flight of slow back to 0", async () => (await inFlightOf(tc, "slow")) === 0);
  });

  it("errors: 404 unknown model, 400 naming the field, 429 in load cooldown, 503 when no node can take the model", async () => {
    const unknown = await errorOf(client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }));
    expect([unknown.status, unknown.code, unknown.param, unknown.type]).toEqual([404, "model_not_found", "model", "invalid_request_error"]);
    const temp = await errorOf(client.chat.completions.create({ model: "words", messages: [{ role: "user", content: "x" }], temperature: 5 }));
    expect([temp.status, temp.param, temp.type]).toEqual([400, "temperature", "invalid_request_error"]);
    const role = await errorOf(client.chat.completions.create({ model: "words", messages: [{ role: "robot", content: "x" } as unknown as OpenAI.ChatCompletionMessageParam] }));
    expect([role.status, role.param]).toEqual([400, "messages[0].role"]);
    const empty = await errorOf(client.chat.completions.create({ model: "words", messages: [] }));
    expect([empty.status, empty.param]).toEqual([400, "messages"]);
    const size = await errorOf(client.images.generate({ model: "words", prompt: "x", size: "9999x1" }));
    expect([size.status, size.param]).toEqual([400, "size"]);
    const json = await fetch(`${base}/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{not json" });
    expect(json.status).toBe(400);
    expect(((await json.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    // A failed load puts the model in cooldown: the next call is 429, before any new load.
    const failed = await errorOf(client.chat.completions.create({ model: "broken", messages: [{ role: "user", content: "x" }] }));
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(failed.message).toContain("no weights here");
    const cooling = await errorOf(client.chat.completions.create({ model: "broken", messages: [{ role: "user", content: "x" }] }));
    expect([cooling.status, cooling.type, cooling.code]).toEqual([429, "requests", "rate_limit_exceeded"]);
    const nowhere = await errorOf(client.chat.completions.create({ model: "nowhere", messages: [{ role: "user", content: "x" }] }));
    expect([nowhere.status, nowhere.type, nowhere.code]).toEqual([503, "server_error", null]);
  });
});
