import type { MessageInitShape } from "@bufbuild/protobuf";
import type { FastifyInstance, FastifyReply } from "fastify";
import { WardenError } from "@warden/common";
import type { PredictOptions, PredictOptionsSchema, Reply } from "@warden/proto";
import type { CoordinatorHttpContext } from "./coordinator-http.js";
import { callSignal } from "./http-server.js";
import type { OpenAiBackend } from "./openai-backend.js";
import { httpCaller } from "./http-caller.js";
import { errorBody } from "./openai-errors.js";
import { parseChatRequest, parseCompletionRequest, type ChatRequest, type Sampling } from "./openai-schema.js";
import { renderPrompt } from "./prompt-template.js";
import { SseWriter } from "./sse-writer.js";

type PredictInit = MessageInitShape<typeof PredictOptionsSchema>;
/** PredictOptions' scalar fields, plain (spreadable into an init). */
type PredictFields = Partial<Omit<PredictOptions, "$typeName" | "Messages" | "Metadata">>;

/** LocalAI's sampling defaults for a request (and model config) that sets none; Seed -1 = random. */
const localAiDefaults = { temperature: 0.9, topP: 0.95, topK: 40, seed: -1 } as const;

const decoder = new TextDecoder();

/** PredictOptions for one request's sampling settings, as LocalAI fills them (gRPCPredictOpts). */
export function predictOptions(s: Sampling, correlationId: string): PredictFields {
  return {
    Tokens: s.maxTokens ?? 0,
    Temperature: s.temperature ?? localAiDefaults.temperature,
    TopP: s.topP ?? localAiDefaults.topP,
    TopK: s.topK ?? localAiDefaults.topK,
    Seed: s.seed ?? localAiDefaults.seed,
    StopPrompts: [...s.stop],
    PresencePenalty: s.presencePenalty ?? 0,
    FrequencyPenalty: s.frequencyPenalty ?? 0,
    CorrelationId: correlationId,
  };
}

/**
 * Chat as LocalAI sends it: to a backend that templates itself, the
 * messages with UseTokenizerTemplate; to a model with a `promptTemplate`,
 * the prompt rendered here (prompt-template.ts).
 */
export function chatOptions(ctx: CoordinatorHttpContext, req: ChatRequest, correlationId: string): PredictInit {
  const base: PredictFields = { ...predictOptions(req, correlationId), ...(req.tools === undefined ? {} : { Tools: req.tools }), ...(req.toolChoice === undefined ? {} : { ToolChoice: req.toolChoice }) };
  const template = ctx.config().promptTemplates[req.model];
  if (template !== undefined) return { ...base, Prompt: renderPrompt(template, req.messages), UseTokenizerTemplate: false };
  return { ...base, UseTokenizerTemplate: true, Messages: req.messages.map((m) => ({ role: m.role, content: m.content, name: m.name, toolCallId: m.toolCallId, toolCalls: m.toolCalls })) };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Token counts across a stream's replies: the latest a backend reported (LocalAI's reading), else the replies with text. */
class UsageCounter {
  private prompt = 0;
  private completion = 0;
  private chunks = 0;
  add(r: Reply): void {
    if (r.promptTokens > 0) this.prompt = r.promptTokens;
    if (r.tokens > 0) this.completion = r.tokens;
    if (r.message.length > 0) this.chunks++;
  }
  usage(): Usage {
    const completion = this.completion > 0 ? this.completion : this.chunks;
    return { prompt_tokens: this.prompt, completion_tokens: completion, total_tokens: this.prompt + completion };
  }
}

const finishReason = (s: Sampling, u: Usage): "length" | "stop" => (s.maxTokens !== undefined && u.completion_tokens >= s.maxTokens ? "length" : "stop");

/**
 * One streamed completion: the first reply (after a load on demand) sends
 * the headers, so an error before it is a plain JSON error with its status;
 * an error after it is an error event and the end of the stream (no
 * `[DONE]`). A client that goes away aborts `signal`, which cancels the
 * backend call and completes its lease (in-flight back down).
 */
async function streamCompletion(
  reply: FastifyReply,
  replies: AsyncGenerator<Reply>,
  s: Sampling,
  chunk: (delta: string | undefined, finish: "length" | "stop" | null, first: boolean) => unknown,
  usageChunk: (u: Usage) => unknown,
  signal: AbortSignal,
  counted: (completionTokens: number) => void,
): Promise<void> {
  const sse = new SseWriter(reply);
  const counter = new UsageCounter();
  try {
    for await (const r of replies) {
      counter.add(r);
      if (!sse.isStarted) await sse.sendJson(chunk(undefined, null, true));
      if (r.message.length > 0) await sse.sendJson(chunk(decoder.decode(r.message), null, false));
    }
    if (!sse.isStarted) await sse.sendJson(chunk(undefined, null, true));
    const u = counter.usage();
    await sse.sendJson(chunk(undefined, finishReason(s, u), false));
    if (s.includeUsage) await sse.sendJson(usageChunk(u));
    await sse.send("[DONE]");
    sse.end();
  } catch (err) {
    if (!sse.isStarted) throw err;
    if (!signal.aborted) await sse.sendJson(errorBody(WardenError.from(err)));
    sse.end();
  } finally {
    counted(counter.usage().completion_tokens);
  }
}

/** POST /v1/chat/completions and POST /v1/completions. */
export function registerChatRoutes(app: FastifyInstance, ctx: CoordinatorHttpContext, backend: OpenAiBackend): void {
  const created = (): number => Math.floor(ctx.clock.wallNow() / 1000);
  /** The dashboard's tokens per second (CallActivity.onTokens). */
  const tokens = (model: string) => (n: number): void => {
    if (n > 0) ctx.calls?.onTokens(model, n);
  };

  app.post("/v1/chat/completions", async (request, reply) => {
    const p = ctx.auth.requireInference(request);
    const req = parseChatRequest(request.body);
    ctx.auth.checkModel(request, p, req.model);
    const caller = httpCaller(ctx, request, p);
    backend.checkConfigured(req.model);
    const id = `chatcmpl-${ctx.newId()}`;
    const opts = chatOptions(ctx, req, id);
    const signal = callSignal(reply, ctx.config().http.callTimeoutMs);
    const at = created();
    if (!req.stream) {
      const r = await backend.predict(req.model, opts, signal, caller);
      const u = { prompt_tokens: r.promptTokens, completion_tokens: r.tokens, total_tokens: r.promptTokens + r.tokens };
      tokens(req.model)(r.tokens);
      return { id, object: "chat.completion", created: at, model: req.model, choices: [{ index: 0, message: { role: "assistant", content: decoder.decode(r.message) }, finish_reason: finishReason(req, u), logprobs: null }], usage: u };
    }
    const head = { id, object: "chat.completion.chunk", created: at, model: req.model };
    await streamCompletion(
      reply,
      backend.predictStream(req.model, opts, signal, caller),
      req,
      (delta, finish, first) => ({ ...head, choices: [{ index: 0, delta: first ? { role: "assistant", content: "" } : delta === undefined ? {} : { content: delta }, finish_reason: finish, logprobs: null }] }),
      (u) => ({ ...head, choices: [], usage: u }),
      signal,
      tokens(req.model),
    );
    return reply;
  });

  app.post("/v1/completions", async (request, reply) => {
    const p = ctx.auth.requireInference(request);
    const req = parseCompletionRequest(request.body);
    ctx.auth.checkModel(request, p, req.model);
    const caller = httpCaller(ctx, request, p);
    backend.checkConfigured(req.model);
    const id = `cmpl-${ctx.newId()}`;
    const signal = callSignal(reply, ctx.config().http.callTimeoutMs);
    const at = created();
    const opts = predictOptions(req, id);
    if (!req.stream) {
      const choices: unknown[] = [];
      const total: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
      // One prompt at a time: a list is a batch of independent completions, each its own routed call.
      for (const [index, prompt] of req.prompts.entries()) {
        const r = await backend.predict(req.model, { ...opts, Prompt: prompt }, signal, caller);
        const u = { prompt_tokens: r.promptTokens, completion_tokens: r.tokens, total_tokens: r.promptTokens + r.tokens };
        tokens(req.model)(r.tokens);
        total.prompt_tokens += u.prompt_tokens;
        total.completion_tokens += u.completion_tokens;
        total.total_tokens += u.total_tokens;
        choices.push({ index, text: decoder.decode(r.message), finish_reason: finishReason(req, u), logprobs: null });
      }
      return { id, object: "text_completion", created: at, model: req.model, choices, usage: total };
    }
    const head = { id, object: "text_completion", created: at, model: req.model };
    await streamCompletion(
      reply,
      backend.predictStream(req.model, { ...opts, Prompt: req.prompts[0] ?? "" }, signal, caller),
      req,
      (delta, finish) => ({ ...head, choices: [{ index: 0, text: delta ?? "", finish_reason: finish, logprobs: null }] }),
      (u) => ({ ...head, choices: [], usage: u }),
      signal,
      tokens(req.model),
    );
    return reply;
  });
}
