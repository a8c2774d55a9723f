import { checkLoadSettings, invalidArgument, type LoadSettings } from "@warden/common";

/** The per-model config fields that become typed LoadModel fields (README "Running LocalAI's backends"). */
export const loadSettingFields = ["backendModel", "gpuLayers", "threads", "batch", "mmap", "flashAttention", "cuda"] as const;

function optionalInt(v: unknown, field: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v)) throw invalidArgument(field, `must be an integer, got ${JSON.stringify(v)}`);
  return v;
}

function optionalString(v: unknown, field: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string") throw invalidArgument(field, `must be a string, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * Reads a model's typed LoadModel fields; absent ones stay unset (the agent
 * applies LocalAI's defaults). `field` is the model's path, e.g. `models[2]`.
 */
export function parseLoadSettings(v: Readonly<Record<string, unknown>>, field: string): LoadSettings {
  const mmap = v["mmap"];
  if (mmap !== undefined && typeof mmap !== "boolean") throw invalidArgument(`${field}.mmap`, `must be true or false, got ${JSON.stringify(mmap)}`);
  const cuda = v["cuda"];
  if (cuda !== undefined && typeof cuda !== "boolean") throw invalidArgument(`${field}.cuda`, `must be true or false, got ${JSON.stringify(cuda)}`);
  const s: { -readonly [K in keyof LoadSettings]: LoadSettings[K] } = {};
  const backendModel = optionalString(v["backendModel"], `${field}.backendModel`);
  if (backendModel !== undefined) s.backendModel = backendModel;
  const gpuLayers = optionalInt(v["gpuLayers"], `${field}.gpuLayers`);
  if (gpuLayers !== undefined) s.gpuLayers = gpuLayers;
  const threads = optionalInt(v["threads"], `${field}.threads`);
  if (threads !== undefined) s.threads = threads;
  const batch = optionalInt(v["batch"], `${field}.batch`);
  if (batch !== undefined) s.batch = batch;
  if (mmap !== undefined) s.mmap = mmap;
  if (cuda !== undefined) s.cuda = cuda;
  const flashAttention = optionalString(v["flashAttention"], `${field}.flashAttention`);
  if (flashAttention !== undefined) s.flashAttention = flashAttention;
  return checkLoadSettings(s, `${field}.`);
}

/**
 * A model file as the config names it: relative to the agent's modelsPath (or
 * absolute inside it; the agent resolves and confines it). Refused here already
 * when it cannot be valid anywhere: over 4096 characters, control characters,
 * or a ".." segment.
 */
export function checkModelFile(v: string, field: string): string {
  // eslint-disable-next-line no-control-regex
  if (v.length > 4096 || /[\u0000-\u001f\u007f]/.test(v)) throw invalidArgument(field, "must be at most 4096 characters without control characters");
  if (v.split("/").includes("..")) throw invalidArgument(field, `must not contain a ".." segment (files are confined to the agent's modelsPath), got ${JSON.stringify(v.slice(0, 64))}`);
  return v;
}
