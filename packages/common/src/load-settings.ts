import { invalidArgument } from "./errors.js";

/**
 * The LoadModel fields LocalAI sends, as a model config states them.
 * Every field is optional: unset means LocalAI's default, which the agent applies
 * ({@link loadDefaults}; threads default to the node's CPU count), so one model
 * config means the same thing on every node.
 */
export interface LoadSettings {
  /** ModelOptions.Model and ModelIdentity; unset = Warden's model id. See {@link checkBackendModel}. */
  readonly backendModel?: string;
  /** ModelOptions.NGPULayers, 0..{@link maxGpuLayers}. */
  readonly gpuLayers?: number;
  /** ModelOptions.Threads, 1..{@link maxThreads}. */
  readonly threads?: number;
  /** ModelOptions.NBatch, 1..{@link maxBatch}. */
  readonly batch?: number;
  /** ModelOptions.MMap. */
  readonly mmap?: boolean;
  /** ModelOptions.FlashAttention, one of {@link flashAttentionValues}. */
  readonly flashAttention?: string;
  /** ModelOptions.CUDA: Python backends (diffusers, transformers) run on the GPU only with it. */
  readonly cuda?: boolean;
}

/** LocalAI's defaults (core/config defaults.go, generic_defaults.go, hardware_defaults.go). */
export const loadDefaults = {
  /** DefaultNGPULayers: "every layer" for llama.cpp. */
  gpuLayers: 99_999_999,
  /** DefaultPhysicalBatch. */
  batch: 512,
  /** DefaultContextSize, sent when a model's contextSize is 0. */
  contextSize: 4096,
  mmap: true,
  flashAttention: "auto",
  cuda: false,
} as const;

/** Bounds of the typed fields (LocalAI's default gpuLayers is the largest accepted). */
export const maxGpuLayers = 99_999_999;
export const maxThreads = 4096;
export const maxBatch = 1_048_576;
export const maxBackendModelLength = 256;
/** llama.cpp's spellings; other backends ignore the field. */
export const flashAttentionValues: readonly string[] = ["auto", "on", "off"];

const backendModelPattern = /^[A-Za-z0-9._:@+=/-]+$/;

/**
 * An upstream-facing model name: a file name or a Hugging Face repo id such as
 * `Qwen/Qwen2-0.5B`. At most 256 characters of `[A-Za-z0-9._:@+=/-]`, no leading
 * `-` or `/`, no empty, `.` or `..` path segment — backends join it under their
 * models directory, so it must never climb out of it.
 */
export function checkBackendModel(field: string, value: string): string {
  const shown = JSON.stringify(value.slice(0, 64));
  if (value.length === 0 || value.length > maxBackendModelLength || !backendModelPattern.test(value)) {
    throw invalidArgument(field, `must be 1..${String(maxBackendModelLength)} characters of [A-Za-z0-9._:@+=/-], got ${shown}`);
  }
  if (value.startsWith("-") || value.startsWith("/")) throw invalidArgument(field, `must not start with "-" or "/", got ${shown}`);
  if (value.split("/").some((seg) => seg === "" || seg === "." || seg === "..")) throw invalidArgument(field, `must not contain an empty, "." or ".." path segment, got ${shown}`);
  return value;
}

function intIn(v: number | undefined, field: string, min: number, max: number): void {
  if (v === undefined) return;
  if (!Number.isInteger(v) || v < min || v > max) throw invalidArgument(field, `must be an integer in ${String(min)}..${String(max)}, got ${String(v)}`);
}

/** Validates every set field (whole, before anything is applied); `prefix` names them, e.g. `models[0].`. */
export function checkLoadSettings(s: LoadSettings, prefix = ""): LoadSettings {
  if (s.backendModel !== undefined) checkBackendModel(`${prefix}backendModel`, s.backendModel);
  intIn(s.gpuLayers, `${prefix}gpuLayers`, 0, maxGpuLayers);
  intIn(s.threads, `${prefix}threads`, 1, maxThreads);
  intIn(s.batch, `${prefix}batch`, 1, maxBatch);
  if (s.flashAttention !== undefined && !flashAttentionValues.includes(s.flashAttention)) {
    throw invalidArgument(`${prefix}flashAttention`, `must be one of ${flashAttentionValues.join(", ")}, got ${JSON.stringify(s.flashAttention.slice(0, 32))}`);
  }
  return s;
}
