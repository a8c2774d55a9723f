import type { PredictOptions } from "@warden/proto";

/**
 * What backend-sim answers a Predict with, from what it was sent: words
 * `w0 w1 …` up to the request's Tokens (or the predict_tokens knob), cut
 * before the first word that is one of StopPrompts; with the `echo` knob,
 * a JSON echo of the request instead, so a test sees exactly what a caller
 * (the OpenAI API) put in PredictOptions.
 */
export interface SimAnswer {
  /** The text chunks, in order: "w0", " w1", … (or the echo, in one chunk). */
  readonly chunks: readonly string[];
  /** Completion tokens reported. */
  readonly tokens: number;
  /** Prompt "tokens": characters of the prompt, or of the messages' contents for a templated chat. */
  readonly promptTokens: number;
}

/** The echo of a request: the fields a chat or completion maps onto. */
export function simEcho(req: PredictOptions): string {
  return JSON.stringify({
    prompt: req.Prompt,
    messages: req.Messages.map((m) => ({ role: m.role, content: m.content, ...(m.name === "" ? {} : { name: m.name }) })),
    useTokenizerTemplate: req.UseTokenizerTemplate,
    tokens: req.Tokens,
    temperature: req.Temperature,
    topP: req.TopP,
    topK: req.TopK,
    seed: req.Seed,
    stop: req.StopPrompts,
    tools: req.Tools,
  });
}

export function simAnswer(req: PredictOptions, o: { readonly defaultTokens: number; readonly echo: boolean }): SimAnswer {
  const promptTokens = req.Prompt !== "" ? req.Prompt.length : req.Messages.reduce((n, m) => n + m.content.length, 0);
  if (o.echo) return { chunks: [simEcho(req)], tokens: 1, promptTokens };
  const n = req.Tokens > 0 ? Math.min(req.Tokens, 100_000) : o.defaultTokens;
  const stop = new Set(req.StopPrompts.map((s) => s.trim()));
  const chunks: string[] = [];
  for (let i = 0; i < n; i++) {
    const w = `w${String(i)}`;
    if (stop.has(w)) break;
    chunks.push(i === 0 ? w : ` ${w}`);
  }
  return { chunks, tokens: chunks.length, promptTokens };
}
