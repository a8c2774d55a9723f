import { createWriteStream } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Code, WardenError, invalidArgument, isWardenError, sampleRateOf, wavFile } from "@warden/common";
import type { CoordinatorHttpContext } from "./coordinator-http.js";
import { callSignal } from "./http-server.js";
import type { OpenAiBackend } from "./openai-backend.js";
import { multipartError } from "./client-errors.js";
import { missing } from "./openai-fields.js";
import { parseEmbeddingRequest, parseImageRequest, parseSpeechRequest, parseTranscriptionFields } from "./openai-schema.js";
import { httpCaller } from "./http-caller.js";

/** Most audio one speech call collects from TTSStream before answering. */
export const maxSpeechBytes = 256 * 1024 * 1024;
/** Multipart fields (besides the file) one transcription request may carry. */
const maxMultipartFields = 16;
const maxFieldChars = 4_000_000;

/** A short, safe file extension from an upload's name (whisper backends pick decoders by it). */
function extensionOf(filename: string): string {
  const m = /\.([A-Za-z0-9]{1,8})$/.exec(filename);
  return m === null ? "" : `.${m[1] ?? ""}`;
}

/** Reads the multipart body: the one `file` part to `dir`, the other parts as fields. Partial files are removed on error. */
async function readUpload(request: FastifyRequest, dir: string, id: string): Promise<{ path: string; fields: Record<string, string> }> {
  if (!request.isMultipart()) throw new WardenError(Code.InvalidArgument, "file: the body must be multipart/form-data with a file part", { details: { field: "file" } });
  const fields: Record<string, string> = {};
  let path: string | undefined;
  try {
    for await (const part of request.parts({ limits: { files: 1, fields: maxMultipartFields, fieldSize: maxFieldChars, parts: maxMultipartFields + 1 } })) {
      if (part.type === "file") {
        if (part.fieldname !== "file") throw invalidArgument(part.fieldname, "the audio goes in the part named file");
        path = join(dir, `${id}${extensionOf(part.filename)}`);
        await pipeline(part.file, createWriteStream(path, { flags: "wx", mode: 0o600 }));
        if (part.file.truncated) throw new WardenError(Code.ResourceExhausted, "file: larger than http.bodyLimit", { details: { field: "file", httpStatus: 413 } });
      } else {
        if (part.valueTruncated) throw invalidArgument(part.fieldname, `longer than ${String(maxFieldChars)} characters`);
        fields[part.fieldname] = String(part.value);
      }
    }
  } catch (err) {
    if (path !== undefined) await rm(path, { force: true });
    throw multipartError(err);
  }
  if (path === undefined) throw missing("file", "is required (the audio file)");
  return { path, fields };
}

/** POST /v1/embeddings, /v1/audio/speech, /v1/audio/transcriptions, /v1/images/generations. */
export function registerMediaRoutes(app: FastifyInstance, ctx: CoordinatorHttpContext, backend: OpenAiBackend): void {
  app.post("/v1/embeddings", async (request, reply) => {
    const p = ctx.auth.requireInference(request);
    const req = parseEmbeddingRequest(request.body);
    ctx.auth.checkModel(request, p, req.model);
    const caller = httpCaller(ctx, request, p);
    backend.checkConfigured(req.model);
    const signal = callSignal(reply, ctx.config().http.callTimeoutMs);
    const data: unknown[] = [];
    let promptTokens = 0;
    // One Embedding call per input, as LocalAI makes them.
    for (const [index, input] of req.inputs.entries()) {
      const r = await backend.embedding(req.model, "text" in input ? { Prompt: input.text } : { EmbeddingTokens: [...input.tokens] }, signal, caller);
      // Cutting a vector is honest only for models trained for it (OpenAI's text-embedding-3); Warden cannot tell, so it never cuts.
      if (req.dimensions !== undefined && r.embeddings.length !== req.dimensions) {
        throw invalidArgument("dimensions", `model ${JSON.stringify(req.model)} makes ${String(r.embeddings.length)}-dimensional vectors and Warden does not shorten them (it cannot tell whether this model's vectors keep their meaning when cut): leave dimensions out or send ${String(r.embeddings.length)}`);
      }
      promptTokens += r.promptTokens > 0 ? r.promptTokens : r.tokens;
      const embedding = req.base64 ? Buffer.from(Float32Array.from(r.embeddings).buffer).toString("base64") : r.embeddings;
      data.push({ object: "embedding", index, embedding });
    }
    return { object: "list", data, model: req.model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } };
  });

  app.post("/v1/audio/speech", async (request, reply) => {
    const p = ctx.auth.requireInference(request);
    const req = parseSpeechRequest(request.body);
    ctx.auth.checkModel(request, p, req.model);
    backend.checkConfigured(req.model);
    const signal = callSignal(reply, ctx.config().http.callTimeoutMs);
    const tts = { text: req.input, voice: req.voice, ...(req.language === undefined ? {} : { language: req.language }), ...(req.instructions === undefined ? {} : { instructions: req.instructions }) };
    // TTSStream first: the audio comes back over the wire from any node. A
    // backend without it gets TTS with `dst`, a file on the coordinator's machine.
    const chunks: Buffer[] = [];
    let bytes = 0;
    let sampleRate: number | undefined;
    let streamed = true;
    try {
      for await (const r of backend.ttsStream(req.model, tts, signal)) {
        if (r.audio.length > 0) {
          bytes += r.audio.length;
          if (bytes > maxSpeechBytes) throw new WardenError(Code.ResourceExhausted, `the speech is longer than ${String(maxSpeechBytes)} bytes (send a shorter input)`, { details: { field: "input", httpStatus: 400 } });
          chunks.push(Buffer.from(r.audio));
        } else if (chunks.length === 0 && sampleRate === undefined) sampleRate = sampleRateOf(r.message);
      }
    } catch (err) {
      if (!isWardenError(err, Code.Unimplemented)) throw err;
      streamed = false;
    }
    let audio: Buffer;
    if (streamed) {
      const pcm = Buffer.concat(chunks);
      audio = req.format === "wav" && sampleRate !== undefined ? wavFile(pcm, sampleRate) : pcm;
    } else {
      const dst = join(ctx.filesDir, `${ctx.newId()}.wav`);
      try {
        const r = await backend.tts(req.model, { ...tts, dst }, signal);
        if (!r.success) throw new WardenError(Code.Internal, `TTS failed: ${r.message}`);
        const file = await readFile(dst);
        // A WAV file's 44-byte header off for raw PCM.
        audio = req.format === "pcm" && file.subarray(0, 4).toString("latin1") === "RIFF" ? file.subarray(44) : file;
      } finally {
        await rm(dst, { force: true });
      }
    }
    const isWav = audio.subarray(0, 4).toString("latin1") === "RIFF";
    return reply.type(req.format === "pcm" ? "audio/pcm" : isWav ? "audio/wav" : "application/octet-stream").send(audio);
  });

  app.post("/v1/audio/transcriptions", async (request, reply) => {
    const p = ctx.auth.requireInference(request);
    const { path, fields } = await readUpload(request, ctx.filesDir, ctx.newId());
    try {
      const req = parseTranscriptionFields(fields);
      ctx.auth.checkModel(request, p, req.model);
      backend.checkConfigured(req.model);
      const signal = callSignal(reply, ctx.config().http.callTimeoutMs);
      const r = await backend.transcribe(req.model, { dst: path, language: req.language, prompt: req.prompt, temperature: req.temperature }, signal);
      if (req.format === "text") return await reply.type("text/plain; charset=utf-8").send(r.text);
      if (req.format === "json") return { text: r.text };
      return {
        task: "transcribe",
        language: r.language,
        duration: r.duration,
        text: r.text,
        segments: r.segments.map((s) => ({ id: s.id, start: Number(s.start), end: Number(s.end), text: s.text, tokens: [...s.tokens] })),
      };
    } finally {
      await rm(path, { force: true });
    }
  });

  app.post("/v1/images/generations", async (request, reply) => {
    const p = ctx.auth.requireInference(request);
    const req = parseImageRequest(request.body);
    ctx.auth.checkModel(request, p, req.model);
    backend.checkConfigured(req.model);
    const signal = callSignal(reply, ctx.config().http.callTimeoutMs);
    const data: { b64_json: string }[] = [];
    for (let i = 0; i < req.n; i++) {
      const dst = join(ctx.filesDir, `${ctx.newId()}.png`);
      try {
        const r = await backend.generateImage(req.model, { positivePrompt: req.prompt, negativePrompt: req.negativePrompt, width: req.width, height: req.height, step: req.step, seed: req.seed === 0 ? 0 : req.seed + i, dst }, signal);
        if (!r.success) throw new WardenError(Code.Internal, `GenerateImage failed: ${r.message}`);
        data.push({ b64_json: (await readFile(dst)).toString("base64") });
      } finally {
        await rm(dst, { force: true });
      }
    }
    return { created: Math.floor(ctx.clock.wallNow() / 1000), data };
  });
}
