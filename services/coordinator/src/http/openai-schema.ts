import { invalidArgument } from "@warden/common";
import { breaks } from "../auth/backend-path-check.js";
import { backendPathRules } from "../auth/backend-path-rules.js";
import { bodyOf, isRecord, list, missing, optBool, optEnum, optInt, optJson, optNumber, optString, reqString, type Body } from "./openai-fields.js";

/**
 * What the OpenAI-compatible API accepts, each bound documented here (past
 * one: 400 naming the field in `param`). Fields OpenAI defines that Warden
 * does not map (logprobs, response_format of chat, user, …) are ignored, as
 * by LocalAI; the whole body is also capped by `http.bodyLimit`.
 */
export const openAiBounds = Object.freeze({
  modelChars: 256,
  messages: 4096,
  contentChars: 4_000_000,
  contentParts: 256,
  nameChars: 256,
  maxTokens: 1_000_000,
  stopSequences: 16,
  stopChars: 1024,
  toolsJsonChars: 1_000_000,
  prompts: 64,
  embeddingInputs: 2048,
  embeddingTokens: 1_000_000,
  embeddingDimensions: 65_536,
  speechChars: 100_000,
  voiceChars: 256,
  instructionsChars: 4096,
  languageChars: 64,
  imagePromptChars: 32_000,
  images: 10,
  imageSide: 4096,
  imageSteps: 1000,
});

const b = openAiBounds;

/** Sampling settings shared by chat and completions (absent = the backend's or LocalAI's default, see openai-chat.ts). */
export interface Sampling {
  readonly maxTokens: number | undefined;
  readonly temperature: number | undefined;
  readonly topP: number | undefined;
  readonly topK: number | undefined;
  readonly seed: number | undefined;
  readonly stop: readonly string[];
  readonly presencePenalty: number | undefined;
  readonly frequencyPenalty: number | undefined;
  readonly stream: boolean;
  readonly includeUsage: boolean;
}

export interface ChatMessage {
  readonly role: string;
  readonly content: string;
  readonly name: string;
  readonly toolCallId: string;
  /** The assistant's tool calls, as JSON text (PredictOptions Message.tool_calls). */
  readonly toolCalls: string;
}

export interface ChatRequest extends Sampling {
  readonly model: string;
  readonly messages: readonly ChatMessage[];
  readonly tools: string | undefined;
  readonly toolChoice: string | undefined;
}

export interface CompletionRequest extends Sampling {
  readonly model: string;
  readonly prompts: readonly string[];
}

export function modelOf(body: Body): string {
  return reqString(body["model"], "model", b.modelChars);
}

function sampling(body: Body): Sampling {
  const stopRaw = body["stop"];
  let stop: string[] = [];
  if (typeof stopRaw === "string") stop = [optString(stopRaw, "stop", b.stopChars, 1) ?? ""];
  else if (stopRaw !== undefined && stopRaw !== null) stop = list(stopRaw, "stop", b.stopSequences).map((s, i) => reqString(s, `stop[${String(i)}]`, b.stopChars));
  const n = optInt(body["n"], "n", 1, 128);
  if (n !== undefined && n !== 1) throw invalidArgument("n", "only 1 is supported");
  const so = body["stream_options"];
  if (so !== undefined && so !== null && !isRecord(so)) throw invalidArgument("stream_options", "must be an object");
  const maxTokens = optInt(body["max_completion_tokens"], "max_completion_tokens", 1, b.maxTokens) ?? optInt(body["max_tokens"], "max_tokens", 1, b.maxTokens);
  return {
    maxTokens,
    temperature: optNumber(body["temperature"], "temperature", 0, 2),
    topP: optNumber(body["top_p"], "top_p", 0, 1),
    topK: optInt(body["top_k"], "top_k", 0, 1_000_000),
    seed: optInt(body["seed"], "seed", -(2 ** 31), 2 ** 31 - 1),
    stop,
    presencePenalty: optNumber(body["presence_penalty"], "presence_penalty", -2, 2),
    frequencyPenalty: optNumber(body["frequency_penalty"], "frequency_penalty", -2, 2),
    stream: optBool(body["stream"], "stream") ?? false,
    includeUsage: isRecord(so) ? (optBool(so["include_usage"], "stream_options.include_usage") ?? false) : false,
  };
}

const roles = ["system", "developer", "user", "assistant", "tool", "function"] as const;

/** `content` as a string or a list of parts: text parts are joined; other kinds are refused, naming the part. */
function contentOf(v: unknown, field: string, role: string): string {
  if (v === undefined || v === null) {
    if (role === "assistant") return "";
    throw missing(field);
  }
  if (typeof v === "string") return optString(v, field, b.contentChars) ?? "";
  const parts = list(v, field, b.contentParts);
  let total = 0;
  return parts
    .map((p, j) => {
      const f = `${field}[${String(j)}]`;
      if (!isRecord(p)) throw invalidArgument(f, "must be an object");
      if (p["type"] !== "text") throw invalidArgument(`${f}.type`, `only "text" parts are supported, got ${JSON.stringify(p["type"])}`);
      const t = optString(p["text"], `${f}.text`, b.contentChars) ?? "";
      total += t.length;
      if (total > b.contentChars) throw invalidArgument(field, `longer than ${String(b.contentChars)} characters`);
      return t;
    })
    .join("");
}

/** POST /v1/chat/completions. */
export function parseChatRequest(raw: unknown): ChatRequest {
  const body = bodyOf(raw);
  const model = modelOf(body);
  const messages = list(body["messages"], "messages", b.messages, 1).map((m, i): ChatMessage => {
    const f = `messages[${String(i)}]`;
    if (!isRecord(m)) throw invalidArgument(f, "must be an object");
    const role = optEnum(m["role"], `${f}.role`, roles);
    if (role === undefined) throw missing(`${f}.role`);
    return {
      role,
      content: contentOf(m["content"], `${f}.content`, role),
      name: optString(m["name"], `${f}.name`, b.nameChars) ?? "",
      toolCallId: optString(m["tool_call_id"], `${f}.tool_call_id`, b.nameChars) ?? "",
      toolCalls: m["tool_calls"] === undefined || m["tool_calls"] === null ? "" : optJson(list(m["tool_calls"], `${f}.tool_calls`, 128), `${f}.tool_calls`, b.toolsJsonChars) ?? "",
    };
  });
  const tools = body["tools"] === undefined || body["tools"] === null ? undefined : optJson(list(body["tools"], "tools", 128), "tools", b.toolsJsonChars);
  const tc = body["tool_choice"];
  if (tc !== undefined && tc !== null && typeof tc !== "string" && !isRecord(tc)) throw invalidArgument("tool_choice", "must be a string or an object");
  return { ...sampling(body), model, messages, tools, toolChoice: optJson(tc, "tool_choice", b.toolsJsonChars) };
}

/** POST /v1/completions: `prompt` is one string or a list (one choice each). */
export function parseCompletionRequest(raw: unknown): CompletionRequest {
  const body = bodyOf(raw);
  const model = modelOf(body);
  const p = body["prompt"];
  const prompts = typeof p === "string" ? [optString(p, "prompt", b.contentChars) ?? ""] : list(p ?? null, "prompt", b.prompts, 1).map((s, i) => optString(s, `prompt[${String(i)}]`, b.contentChars) ?? "");
  const s = sampling(body);
  if (s.stream && prompts.length > 1) throw invalidArgument("prompt", "stream: true takes one prompt");
  return { ...s, model, prompts };
}

export interface EmbeddingRequest {
  readonly model: string;
  /** One entry per input: text, or token ids. */
  readonly inputs: readonly ({ readonly text: string } | { readonly tokens: readonly number[] })[];
  readonly base64: boolean;
  /** Checked against the model's vectors (openai-media.ts): equal passes, any other is 400; never cut. */
  readonly dimensions: number | undefined;
}

function tokenList(v: readonly unknown[], field: string): number[] {
  return v.map((t, j) => optInt(t, `${field}[${String(j)}]`, 0, 2 ** 31 - 1) ?? 0);
}

/** POST /v1/embeddings: input is a string, a list of strings, a list of token ids, or a list of those. */
export function parseEmbeddingRequest(raw: unknown): EmbeddingRequest {
  const body = bodyOf(raw);
  const model = modelOf(body);
  const input = body["input"];
  let inputs: EmbeddingRequest["inputs"];
  if (typeof input === "string") inputs = [{ text: optString(input, "input", b.contentChars) ?? "" }];
  else {
    const l = list(input ?? null, "input", b.embeddingTokens, 1);
    if (l.every((x) => typeof x === "number")) inputs = [{ tokens: tokenList(l, "input") }];
    else {
      if (l.length > b.embeddingInputs) throw invalidArgument("input", `at most ${String(b.embeddingInputs)} inputs, got ${String(l.length)}`);
      inputs = l.map((x, i) => {
        const f = `input[${String(i)}]`;
        if (typeof x === "string") return { text: optString(x, f, b.contentChars) ?? "" };
        if (!Array.isArray(x)) throw invalidArgument(f, "must be a string or a list of token ids");
        return { tokens: tokenList(list(x, f, b.embeddingTokens, 1), f) };
      });
    }
  }
  const dimensions = optInt(body["dimensions"], "dimensions", 1, b.embeddingDimensions);
  const format = optEnum(body["encoding_format"], "encoding_format", ["float", "base64"]);
  return { model, inputs, base64: format === "base64", dimensions };
}

export interface SpeechRequest {
  readonly model: string;
  readonly input: string;
  readonly voice: string;
  readonly format: "wav" | "pcm";
  readonly instructions: string | undefined;
  readonly language: string | undefined;
}

/** OpenAI's compressed speech formats: each would need an encoder Warden does not carry. */
const compressedAudio: readonly string[] = ["mp3", "opus", "aac", "flac"];

/**
 * POST /v1/audio/speech: WAV (the default here, where OpenAI's is mp3) or
 * raw 16-bit PCM; a compressed format is refused naming response_format,
 * never answered with WAV bytes under another name.
 */
export function parseSpeechRequest(raw: unknown): SpeechRequest {
  const body = bodyOf(raw);
  const model = modelOf(body);
  const input = reqString(body["input"], "input", b.speechChars);
  const voice = optString(body["voice"], "voice", b.voiceChars) ?? "";
  // Some TTS backends read a reference audio named by voice: a name, never a path on the node.
  const voiceRule = backendPathRules["TTSRequest.voice"];
  const notAName = voiceRule === undefined ? undefined : breaks(voiceRule, voice);
  if (notAName !== undefined) throw invalidArgument("voice", notAName);
  const rf = body["response_format"];
  if (typeof rf === "string" && compressedAudio.includes(rf)) throw invalidArgument("response_format", `${JSON.stringify(rf)} needs an audio encoder Warden does not carry: ask for "wav" (the default here, where OpenAI's is "mp3") or "pcm"`);
  const format = optEnum(rf, "response_format", ["wav", "pcm"]) ?? "wav";
  optNumber(body["speed"], "speed", 0.25, 4);
  return { model, input, voice, format, instructions: optString(body["instructions"], "instructions", b.instructionsChars), language: optString(body["language"], "language", b.languageChars) };
}

export interface ImageRequest {
  readonly model: string;
  readonly prompt: string;
  readonly negativePrompt: string;
  readonly n: number;
  readonly width: number;
  readonly height: number;
  readonly step: number;
  readonly seed: number;
}

/** POST /v1/images/generations: images come back as b64_json (a URL would need a file store to serve them from). */
export function parseImageRequest(raw: unknown): ImageRequest {
  const body = bodyOf(raw);
  const model = modelOf(body);
  const prompt = reqString(body["prompt"], "prompt", b.imagePromptChars);
  const size = optString(body["size"], "size", 16) ?? "512x512";
  const m = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  const width = Number(m?.[1] ?? 0);
  const height = Number(m?.[2] ?? 0);
  if (m === null || width < 1 || height < 1 || width > b.imageSide || height > b.imageSide) throw invalidArgument("size", `must be WIDTHxHEIGHT, each 1..${String(b.imageSide)}, got ${JSON.stringify(size)}`);
  const format = optEnum(body["response_format"], "response_format", ["b64_json", "url"]);
  if (format === "url") throw invalidArgument("response_format", 'only "b64_json" is supported');
  return {
    model,
    prompt,
    negativePrompt: optString(body["negative_prompt"], "negative_prompt", b.imagePromptChars) ?? "",
    n: optInt(body["n"], "n", 1, b.images) ?? 1,
    width,
    height,
    step: optInt(body["step"], "step", 1, b.imageSteps) ?? 0,
    seed: optInt(body["seed"], "seed", -(2 ** 31), 2 ** 31 - 1) ?? 0,
  };
}

export interface TranscriptionFields {
  readonly model: string;
  readonly language: string;
  readonly prompt: string;
  readonly temperature: number;
  readonly format: "json" | "text" | "verbose_json";
}

/** The text fields of POST /v1/audio/transcriptions (multipart; the file is read separately). */
export function parseTranscriptionFields(fields: Readonly<Record<string, string>>): TranscriptionFields {
  const model = reqString(fields["model"], "model", b.modelChars);
  const t = fields["temperature"];
  const temperature = t === undefined ? 0 : Number(t);
  if (!Number.isFinite(temperature) || temperature < 0 || temperature > 1) throw invalidArgument("temperature", `must be in [0, 1], got ${JSON.stringify(t)}`);
  return {
    model,
    language: optString(fields["language"], "language", b.languageChars) ?? "",
    prompt: optString(fields["prompt"], "prompt", b.contentChars) ?? "",
    temperature,
    format: optEnum(fields["response_format"], "response_format", ["json", "text", "verbose_json"]) ?? "json",
  };
}
