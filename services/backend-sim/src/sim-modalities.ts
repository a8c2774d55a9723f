import { statSync } from "node:fs";
import { basename } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, WardenError, invalidArgument, sleep, wavFile, type Clock } from "@warden/common";
import type { Backend, ReplySchema, TranscriptLiveResponseSchema, TranscriptStreamResponseSchema } from "@warden/proto";
import type { ServiceImpl } from "@warden/grpc";
import { writeDst } from "./sim-dst.js";

/** What the modalities need of the simulator: its identity guard, call log and per-reply delay. */
export interface SimModalityDeps {
  /** The model held, after checking the request's identity (throws as the simulator's guard does). */
  held(identity: string): string;
  log(line: string): void;
  /** Sleep before each reply (knob predict_delay_ms): lets a test cancel mid-stream or hit a deadline. */
  delayMs(): number;
  /** Whether TTSStream answers (knob tts_stream); false = UNIMPLEMENTED. */
  ttsStream(): boolean;
  clock: Clock;
  /** Counts a call as in flight while it runs (Status BUSY). */
  running<T>(fn: () => Promise<T>): Promise<T>;
}

export const simEmbeddingDim = 8;
/** Sample rate of the simulator's synthetic speech (16-bit mono PCM). */
export const simSampleRate = 16_000;
const samplesPerChar = 160;
const maxTextChars = 100_000;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A deterministic unit-free vector of the text: the same prompt always embeds the same. */
export function simEmbedding(text: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < simEmbeddingDim; i++) {
    let h = 2166136261 ^ i;
    for (let j = 0; j < text.length; j++) h = Math.imul(h ^ text.charCodeAt(j), 16777619);
    out.push(((h >>> 0) % 2000) / 1000 - 1);
  }
  return out;
}

/** Synthetic speech for the text: one short tone per character, 16-bit little-endian PCM. */
export function simSpeech(text: string): Uint8Array {
  const chars = Math.min(text.length, maxTextChars);
  const pcm = Buffer.alloc(chars * samplesPerChar * 2);
  for (let c = 0; c < chars; c++) {
    const freq = 200 + (text.charCodeAt(c) % 64) * 10;
    for (let s = 0; s < samplesPerChar; s++) pcm.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * freq * s) / simSampleRate)), (c * samplesPerChar + s) * 2);
  }
  return pcm;
}

/** What the simulator "hears" in an audio file: its name and size, so a test knows the exact text. */
function transcriptOf(path: string): string {
  if (path === "") throw invalidArgument("dst", "must name the audio file");
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    throw new WardenError(Code.InvalidArgument, `dst: cannot read audio file "${path}"`, { details: { field: "dst" } });
  }
  return `heard ${basename(path)} ${String(size)} bytes`;
}

const words = (s: string): string[] => s.toLowerCase().split(/\W+/).filter((w) => w !== "");

/**
 * The simulator's non-text modalities, simple and deterministic, for tests
 * of everything Warden routes: Embedding, TokenizeString, Detokenize,
 * Rerank, TTS (writes a WAV at `dst`), TTSStream (a sample-rate message,
 * then PCM chunks in `audio`), AudioTranscription(+Stream) and the
 * bidi AudioTranscriptionLive. Identity-carrying requests pass the same
 * guard as Predict.
 */
export function simModalities(d: SimModalityDeps): Partial<ServiceImpl<typeof Backend>> {
  const pause = async (signal: AbortSignal): Promise<void> => {
    const ms = d.delayMs();
    if (ms > 0) await sleep(d.clock, ms, signal);
  };
  return {
    async embedding(req, ctx) {
      d.log("Embedding");
      d.held(req.ModelIdentity);
      return d.running(async () => {
        await pause(ctx.signal);
        return { embeddings: simEmbedding(req.Prompt), dim: simEmbeddingDim, tokens: words(req.Prompt).length, promptTokens: words(req.Prompt).length };
      });
    },
    async tokenizeString(req) {
      d.log("TokenizeString");
      d.held(req.ModelIdentity);
      const tokens = [...encoder.encode(req.Prompt)];
      return { length: tokens.length, tokens };
    },
    async detokenize(req) {
      d.log("Detokenize");
      if (req.tokens.some((t) => t < 0 || t > 255)) throw invalidArgument("tokens", "backend-sim tokens are bytes (0..255)");
      return { content: decoder.decode(Uint8Array.from(req.tokens)) };
    },
    async rerank(req) {
      d.log("Rerank");
      d.held(req.ModelIdentity);
      const q = new Set(words(req.query));
      const scored = req.documents.map((text, index) => {
        const w = words(text);
        const hits = w.filter((x) => q.has(x)).length;
        return { index, text, relevanceScore: w.length === 0 ? 0 : hits / w.length };
      });
      scored.sort((a, b) => b.relevanceScore - a.relevanceScore || a.index - b.index);
      const n = req.topN > 0 ? Math.min(req.topN, scored.length) : scored.length;
      return { results: scored.slice(0, n), usage: { totalTokens: words(req.query).length, promptTokens: words(req.query).length } };
    },
    async tTS(req) {
      d.log("TTS");
      d.held(req.ModelIdentity);
      writeDst(req.dst, wavFile(simSpeech(req.text), simSampleRate));
      return { success: true, message: req.dst };
    },
    async *tTSStream(req, ctx): AsyncIterable<MessageInitShape<typeof ReplySchema>> {
      d.log("TTSStream");
      if (!d.ttsStream()) throw new WardenError(Code.Unimplemented, "TTSStream is not implemented by this backend (sim knob tts_stream:false)");
      d.held(req.ModelIdentity);
      yield { message: encoder.encode(JSON.stringify({ sample_rate: simSampleRate })) };
      const pcm = simSpeech(req.text);
      const chunk = samplesPerChar * 2 * 8;
      for (let at = 0; at < pcm.length; at += chunk) {
        await pause(ctx.signal);
        yield { audio: pcm.subarray(at, at + chunk) };
      }
    },
    async audioTranscription(req) {
      d.log("AudioTranscription");
      d.held(req.ModelIdentity);
      const text = transcriptOf(req.dst);
      return { text, language: req.language === "" ? "en" : req.language, segments: [{ id: 0, start: 0n, end: 1n, text }] };
    },
    async *audioTranscriptionStream(req, ctx): AsyncIterable<MessageInitShape<typeof TranscriptStreamResponseSchema>> {
      d.log("AudioTranscriptionStream");
      d.held(req.ModelIdentity);
      const text = transcriptOf(req.dst);
      for (const w of text.split(" ")) {
        await pause(ctx.signal);
        yield { delta: `${w} ` };
      }
      yield { finalResult: { text, language: req.language === "" ? "en" : req.language } };
    },
    async *audioTranscriptionLive(requests, ctx): AsyncIterable<MessageInitShape<typeof TranscriptLiveResponseSchema>> {
      d.log("AudioTranscriptionLive");
      let configured = false;
      const heard: string[] = [];
      for await (const r of requests) {
        if (r.payload.case === "config") {
          configured = true;
          heard.length = 0;
          yield { ready: true };
        } else if (r.payload.case === "audio") {
          if (!configured) throw invalidArgument("config", "the first message must carry a config");
          await pause(ctx.signal);
          const delta = `frame${String(heard.length)}:${String(r.payload.value.pcm.length)}`;
          heard.push(delta);
          yield { delta };
        }
      }
      yield { finalResult: { text: heard.join(" ") } };
    },
  };
}
