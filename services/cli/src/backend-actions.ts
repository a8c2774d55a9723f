/**
 * The LocalAI-protocol commands (`warden embed`, `warden tts`, `warden
 * transcribe`): backend.Backend calls to the coordinator, which routes them
 * to the model named in the `warden-model` metadata (loading it on demand).
 * Loaded on demand by program.ts, like admin-actions.ts.
 */
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { Metadata } from "@grpc/grpc-js/build/src/metadata.js";
import { Backend } from "@warden/proto";
import type { CallOptions, Client } from "@warden/grpc";
import { cliClient } from "./cli-client.js";
import { Code, WardenError, invalidArgument, isWardenError, sampleRateOf, wavFile } from "@warden/common";
import type { ActionContext, GlobalOpts } from "./action-context.js";

const backend = (g: GlobalOpts): Client<typeof Backend> => cliClient(Backend, g);

/** Bound on the text a command sends (a prompt, a TTS input). */
const maxTextChars = 1_000_000;

function call(c: ActionContext, g: GlobalOpts, model: string): CallOptions {
  if (model === "" || model.length > 256) throw invalidArgument("<model>", "must be 1..256 characters");
  const metadata = new Metadata();
  metadata.set("warden-model", model);
  return { metadata, timeoutMs: c.deadline(g) };
}

function checkText(text: string, what: string): void {
  if (text.length > maxTextChars) throw invalidArgument(what, `longer than ${String(maxTextChars)} characters`);
}

export async function embed(c: ActionContext, g: GlobalOpts, model: string, text: string): Promise<number | undefined> {
  checkText(text, "<text>");
  const opts = call(c, g, model);
  const done = c.progress(`waiting for ${model}`);
  const client = backend(g);
  try {
    const r = await client.embedding({ Prompt: text }, opts);
    done();
    c.print(g.json ? JSON.stringify({ model, dim: r.dim === 0 ? r.embeddings.length : r.dim, tokens: r.tokens, embedding: r.embeddings }) : r.embeddings.map((x) => String(x)).join(" "));
    return undefined;
  } finally {
    done();
    client.close();
  }
}

/**
 * Speech for `text` into `--out` on this machine: TTSStream's audio chunks
 * (a WAV when the backend says its sample rate, else the raw bytes). A
 * backend without TTSStream gets TTS with `dst` = the absolute path, which
 * it writes on its own node (the same file only when that is this machine).
 */
export async function tts(c: ActionContext, g: GlobalOpts, model: string, text: string, o: { out: string; voice?: string; language?: string }): Promise<number | undefined> {
  checkText(text, "<text>");
  if (o.out === "") throw invalidArgument("--out", "must name a file");
  const opts = call(c, g, model);
  const req = { text, voice: o.voice ?? "", ...(o.language === undefined ? {} : { language: o.language }) };
  const done = c.progress(`waiting for ${model}`);
  const client = backend(g);
  try {
    const chunks: Buffer[] = [];
    let sampleRate: number | undefined;
    let streamed = true;
    try {
      for await (const r of client.tTSStream(req, opts)) {
        done();
        if (r.audio.length > 0) chunks.push(Buffer.from(r.audio));
        else if (chunks.length === 0 && sampleRate === undefined) sampleRate = sampleRateOf(r.message);
      }
    } catch (err) {
      if (!isWardenError(err, Code.Unimplemented)) throw err;
      streamed = false;
    }
    const file = resolve(o.out);
    let bytes: number;
    if (streamed) {
      const pcm = Buffer.concat(chunks);
      const body = sampleRate === undefined ? pcm : wavFile(pcm, sampleRate);
      await writeFile(file, body);
      bytes = body.length;
    } else {
      const r = await client.tTS({ ...req, dst: file }, opts);
      if (!r.success) throw new WardenError(Code.Internal, `TTS failed: ${r.message}`);
      bytes = -1;
    }
    done();
    if (g.json) c.print(JSON.stringify({ model, file, ...(bytes >= 0 ? { bytes } : {}), ...(sampleRate === undefined ? {} : { sampleRate }), via: streamed ? "TTSStream" : "TTS" }));
    else c.print(streamed ? `wrote ${file} (${String(bytes)} bytes${sampleRate === undefined ? ", raw" : `, ${String(sampleRate)} Hz WAV`})` : `the backend wrote ${file} on its node (TTS)`);
    return undefined;
  } finally {
    done();
    client.close();
  }
}

/** AudioTranscription of `file`, passed as its absolute path: the backend reads it on its node (this machine for a one-node Warden). */
export async function transcribe(c: ActionContext, g: GlobalOpts, model: string, file: string, o: { language?: string; translate?: boolean }): Promise<number | undefined> {
  if (file === "") throw invalidArgument("<file>", "must name an audio file");
  const opts = call(c, g, model);
  const done = c.progress(`waiting for ${model}`);
  const client = backend(g);
  try {
    const r = await client.audioTranscription({ dst: resolve(file), language: o.language ?? "", translate: o.translate === true }, opts);
    done();
    c.print(g.json ? JSON.stringify({ model, text: r.text, language: r.language, duration: r.duration, segments: r.segments.map((s) => ({ id: s.id, start: Number(s.start), end: Number(s.end), text: s.text, speaker: s.speaker })) }) : r.text);
    return undefined;
  } finally {
    done();
    client.close();
  }
}
