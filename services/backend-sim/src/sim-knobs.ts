import { invalidArgument } from "@warden/common";

/** What `Free` does in the simulator. */
export type SimFreeMode = "ok" | "unimplemented" | "hang" | "fail";

/**
 * Fault knobs of backend-sim. Each knob comes from the environment (`SIM_<NAME>`,
 * read once at process start) or from `ModelOptions.Options` as `sim.<name>:<value>`
 * (applied by LoadModel, overriding the environment). Names are the snake_case
 * keys listed in {@link simKnobKeys}.
 */
export interface SimKnobs {
  /** LoadModel sleeps this long before answering. @default 0 */
  loadDelayMs: number;
  /** Predict sleeps this long before answering; PredictStream sleeps it before each token. @default 0 */
  predictDelayMs: number;
  /**
   * Per token, on top of predictDelayMs: Predict sleeps predictDelayMs +
   * tokens × tokenDelayMs; PredictStream sleeps predictDelayMs + tokenDelayMs
   * before each token. @default 0
   */
  tokenDelayMs: number;
  /**
   * Predictions (Predict and PredictStream) served at once; more wait, first
   * come first served (llama.cpp's slots, LocalAI's `parallel_requests`), so
   * one process's throughput is capped as a GPU's is. 0 = unlimited. @default 0
   */
  parallel: number;
  /** Tokens produced per Predict / PredictStream when the request's Tokens is 0. @default 3 */
  predictTokens: number;
  /** MiB of real memory (touched, so it is resident) allocated by LoadModel and released by Free. @default 0 */
  allocMib: number;
  /** How Free behaves. @default "ok" */
  free: SimFreeMode;
  /** Ignore SIGTERM (only SIGKILL ends the process). @default false */
  ignoreSigterm: boolean;
  /** Exit (code {@link SimKnobs.crashExitCode}) when the Nth Predict/PredictStream arrives; 0 = never. @default 0 */
  crashAfter: number;
  /** Exit code used by crashAfter. @default 70 */
  crashExitCode: number;
  /** LoadModel answers success=false with this message; empty = succeed. @default "" */
  failLoad: string;
  /**
   * Exit with this code before ready: from the environment the process exits at
   * start before binding; from Options it exits inside LoadModel. -1 = never. @default -1
   */
  exitCode: number;
  /** Sleep this long before binding the port (slow start). Environment only. @default 0 */
  startDelayMs: number;
  /** Append one line per RPC received (`Health`, `Free`, ...) and per signal to this file; empty = off. @default "" */
  callLog: string;
  /**
   * While this file holds a count above 0, an identity-checked request is
   * answered NOT_FOUND "model identity mismatch" (as a recycled port would be)
   * and the count is decremented: shared by every process given the knob, so
   * a test can make exactly the first instance, or the first N answers, stale. @default ""
   */
  mismatchFile: string;
  /** Predict and PredictStream answer `<model>: ` and a JSON echo of what they were sent (sim-chat.ts), instead of words. @default false */
  echo: boolean;
  /** TTSStream answers; false = UNIMPLEMENTED, as a backend with TTS only. @default true */
  ttsStream: boolean;
  /** LoadModel reads ModelFile and answers success=false unless it hashes to this SHA-256 (hex); empty = off. @default "" */
  modelFileSha256: string;
  /**
   * Prefill cost: Predict and PredictStream wait this long per prompt block
   * not in the prefix cache before the first token (sim-prefix-cache.ts). 0 = no prefill cost. @default 0
   */
  prefillBlockMs: number;
  /** Capacity of the prefix cache in blocks (an LRU, per process); 0 = no cache (every block is prefilled). @default 0 */
  prefixCacheBlocks: number;
  /** Characters per prompt block (at least 1). @default 64 */
  prefixBlockChars: number;
  /**
   * After answering, the prompt followed by the answer is cached too, as a
   * real engine keeps the KV of the tokens it generated (vLLM's prefix
   * caching, llama.cpp's slot): a conversation's next turn, resending that
   * answer, finds it cached where it was generated. @default true
   */
  prefixCacheOutput: boolean;
}

export const defaultSimKnobs: Readonly<SimKnobs> = {
  loadDelayMs: 0,
  predictDelayMs: 0,
  tokenDelayMs: 0,
  parallel: 0,
  predictTokens: 3,
  allocMib: 0,
  free: "ok",
  ignoreSigterm: false,
  crashAfter: 0,
  crashExitCode: 70,
  failLoad: "",
  exitCode: -1,
  startDelayMs: 0,
  callLog: "",
  mismatchFile: "",
  echo: false,
  ttsStream: true,
  modelFileSha256: "",
  prefillBlockMs: 0,
  prefixCacheBlocks: 0,
  prefixBlockChars: 64,
  prefixCacheOutput: true,
};

type KnobKind = "ms" | "count" | "bool" | "text" | "code" | "free";

/** snake_case knob name → field and value kind. */
export const simKnobKeys: Readonly<Record<string, readonly [keyof SimKnobs, KnobKind]>> = {
  load_delay_ms: ["loadDelayMs", "ms"],
  predict_delay_ms: ["predictDelayMs", "ms"],
  token_delay_ms: ["tokenDelayMs", "ms"],
  parallel: ["parallel", "count"],
  predict_tokens: ["predictTokens", "count"],
  alloc_mib: ["allocMib", "count"],
  free: ["free", "free"],
  ignore_sigterm: ["ignoreSigterm", "bool"],
  crash_after: ["crashAfter", "count"],
  crash_exit_code: ["crashExitCode", "code"],
  fail_load: ["failLoad", "text"],
  exit_code: ["exitCode", "code"],
  start_delay_ms: ["startDelayMs", "ms"],
  call_log: ["callLog", "text"],
  mismatch_file: ["mismatchFile", "text"],
  echo: ["echo", "bool"],
  tts_stream: ["ttsStream", "bool"],
  model_file_sha256: ["modelFileSha256", "text"],
  prefill_block_ms: ["prefillBlockMs", "ms"],
  prefix_cache_blocks: ["prefixCacheBlocks", "count"],
  prefix_block_chars: ["prefixBlockChars", "count"],
  prefix_cache_output: ["prefixCacheOutput", "bool"],
};

const maxCount = 1_000_000;

function parseValue(kind: KnobKind, raw: string, field: string): number | boolean | string {
  switch (kind) {
    case "ms":
    case "count": {
      if (!/^\d{1,9}$/.test(raw)) throw invalidArgument(field, `expected a non-negative integer, got "${raw}"`);
      const n = Number(raw);
      if (kind === "count" && n > maxCount) throw invalidArgument(field, `must be <= ${maxCount}`);
      return n;
    }
    case "code": {
      if (!/^-?\d{1,3}$/.test(raw)) throw invalidArgument(field, `expected an exit code, got "${raw}"`);
      const n = Number(raw);
      if (n < -1 || n > 255) throw invalidArgument(field, "exit code must be -1..255");
      return n;
    }
    case "bool":
      if (raw === "true" || raw === "1") return true;
      if (raw === "false" || raw === "0" || raw === "") return false;
      throw invalidArgument(field, `expected true or false, got "${raw}"`);
    case "free":
      if (raw === "ok" || raw === "unimplemented" || raw === "hang" || raw === "fail") return raw;
      throw invalidArgument(field, `expected ok, unimplemented, hang or fail, got "${raw}"`);
    case "text":
      return raw;
  }
}

function apply(knobs: SimKnobs, name: string, raw: string, field: string): void {
  const spec = simKnobKeys[name];
  if (spec === undefined) throw invalidArgument(field, `unknown backend-sim knob "${name}" (known: ${Object.keys(simKnobKeys).join(", ")})`);
  const [key, kind] = spec;
  (knobs as unknown as Record<string, unknown>)[key] = parseValue(kind, raw, field);
}

/**
 * Knobs from an environment: every `SIM_<NAME>` variable whose lower-cased
 * name is a knob. Unknown `SIM_` variables are rejected so a typo is loud.
 */
export function parseSimEnv(env: Readonly<Record<string, string | undefined>>, base: Readonly<SimKnobs> = defaultSimKnobs): SimKnobs {
  const knobs = { ...base };
  for (const [k, v] of Object.entries(env)) {
    if (!k.startsWith("SIM_") || v === undefined) continue;
    apply(knobs, k.slice(4).toLowerCase(), v, k);
  }
  return knobs;
}

/**
 * Applies `sim.<name>:<value>` entries of `ModelOptions.Options` on top of
 * `base`. Entries without the `sim.` prefix belong to the model and are ignored.
 * `sim.hang_on_free:true` is accepted as an alias of `sim.free:hang`.
 */
export function parseSimOptions(options: readonly string[], base: Readonly<SimKnobs> = defaultSimKnobs): SimKnobs {
  const knobs = { ...base };
  options.forEach((opt, i) => {
    if (!opt.startsWith("sim.")) return;
    const field = `Options[${String(i)}]`;
    const colon = opt.indexOf(":");
    if (colon < 0) throw invalidArgument(field, `expected "sim.<knob>:<value>", got "${opt}"`);
    const name = opt.slice(4, colon);
    const value = opt.slice(colon + 1);
    if (name === "hang_on_free") {
      if (parseValue("bool", value, field) === true) knobs.free = "hang";
      return;
    }
    apply(knobs, name, value, field);
  });
  return knobs;
}
