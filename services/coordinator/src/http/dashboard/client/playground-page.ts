import { parseSse } from "../sse-parse.js";
import { responseError, type ConsoleContext, type ConsolePage } from "./console-context.js";
import { byId, el } from "./dom.js";

/** Longest prompt sent (characters); the coordinator bounds it again. */
const maxPromptChars = 32_000;
/** Longest answer kept on the page (characters): the rest is counted, not shown. */
const maxShownChars = 200_000;

interface Chunk {
  readonly choices?: readonly { readonly delta?: { readonly content?: string }; readonly text?: string; readonly finish_reason?: string | null }[];
  readonly usage?: { readonly completion_tokens?: number } | null;
}

/**
 * Playground: one chat or completion call to a model through the
 * coordinator's own OpenAI routes (/v1/chat/completions, /v1/completions),
 * streamed, with its time to first token and tokens per second measured here
 * in the browser (the usage the server reports when it sends one, else one
 * token a streamed piece). The page's token is sent: it must be an inference
 * or admin token, as for any client.
 */
export function playgroundPage(ctx: ConsoleContext): ConsolePage {
  let running: AbortController | undefined;

  const stat = (id: string, text: string): void => {
    byId(id).textContent = text;
  };

  const run = async (): Promise<void> => {
    running?.abort();
    const ctrl = new AbortController();
    running = ctrl;
    const model = (byId("pg-model") as HTMLSelectElement).value;
    const mode = (byId("pg-mode") as HTMLSelectElement).value;
    const prompt = (byId("pg-prompt") as HTMLTextAreaElement).value.slice(0, maxPromptChars);
    const maxTokens = Math.max(1, Math.min(4096, Number((byId("pg-max") as HTMLInputElement).value) || 128));
    const out = byId("pg-output");
    const err = byId("pg-error");
    out.textContent = "";
    err.textContent = "";
    out.dataset.done = "false";
    for (const id of ["pg-ttft", "pg-tokens", "pg-rate", "pg-total"]) stat(id, "–");
    (byId("pg-stop") as HTMLButtonElement).disabled = false;
    const body = mode === "chat" ? { model, messages: [{ role: "user", content: prompt }], stream: true, max_tokens: maxTokens, stream_options: { include_usage: true } } : { model, prompt, stream: true, max_tokens: maxTokens, stream_options: { include_usage: true } };
    const started = performance.now();
    let firstAt: number | undefined;
    let pieces = 0;
    let usage: number | undefined;
    let shown = 0;
    try {
      const res = await fetch(mode === "chat" ? "/v1/chat/completions" : "/v1/completions", { method: "POST", headers: { ...ctx.headers(true), accept: "text/event-stream" }, body: JSON.stringify(body), signal: ctrl.signal });
      if (!res.ok || res.body === null) {
        err.textContent = `${res.status === 403 ? "this token may not call models (an inference or admin token may) — " : ""}${await responseError(res)}`;
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const parsed = parseSse(buf + value);
        buf = parsed.rest;
        for (const m of parsed.messages) {
          if (m.data === "[DONE]") continue;
          const c = JSON.parse(m.data) as Chunk & { error?: { message?: string } };
          if (c.error !== undefined) {
            err.textContent = c.error.message ?? "the stream ended with an error";
            continue;
          }
          if (typeof c.usage?.completion_tokens === "number") usage = c.usage.completion_tokens;
          const text = c.choices?.map((ch) => ch.delta?.content ?? ch.text ?? "").join("") ?? "";
          if (text === "") continue;
          firstAt ??= performance.now();
          pieces++;
          if (shown < maxShownChars) {
            out.append(text.slice(0, maxShownChars - shown));
            shown += text.length;
          }
          stat("pg-ttft", `${String(Math.round(firstAt - started))} ms`);
          stat("pg-tokens", String(usage ?? pieces));
        }
      }
    } catch (e) {
      if (!ctrl.signal.aborted) err.textContent = e instanceof Error ? e.message : String(e);
    } finally {
      const end = performance.now();
      const tokens = usage ?? pieces;
      stat("pg-tokens", String(tokens));
      stat("pg-total", `${String(Math.round(end - started))} ms`);
      // Generation rate: tokens after the first over the time after it (the first token's wait is TTFT's).
      if (firstAt !== undefined && tokens > 1 && end > firstAt) stat("pg-rate", `${((tokens - 1) / ((end - firstAt) / 1000)).toFixed(1)} tokens/s`);
      out.dataset.done = "true";
      (byId("pg-stop") as HTMLButtonElement).disabled = true;
      if (running === ctrl) running = undefined;
    }
  };

  let wired = false;
  const wire = (): void => {
    byId("pg-form").addEventListener("submit", (e) => {
      e.preventDefault();
      void run();
    });
    byId("pg-stop").addEventListener("click", () => {
      running?.abort();
    });
  };

  const models = (names: readonly string[]): void => {
    const select = byId("pg-model") as HTMLSelectElement;
    if (names.join("\n") === [...select.options].map((o) => o.value).join("\n")) return;
    const chosen = select.value;
    select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(chosen)) select.value = chosen;
  };

  return {
    id: "playground",
    title: "Playground",
    onShow: () => {
      if (!wired) {
        wired = true;
        wire();
      }
      models(ctx.snapshot()?.models.map((m) => m.model) ?? []);
    },
    onSnapshot: (s) => {
      models(s.models.map((m) => m.model));
    },
  };
}
