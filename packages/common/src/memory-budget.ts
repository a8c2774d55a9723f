import { invalidArgument } from "./errors.js";

/**
 * A node's memory budget: absolute bytes, or a percentage of the
 * node's GPU memory (RAM without GPUs).
 */
export type MemoryBudgetSetting = { readonly t: "bytes"; readonly bytes: number } | { readonly t: "percent"; readonly percent: number };

const units: Readonly<Record<string, number>> = { "": 1, b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, tib: 1024 ** 4, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12 };

/** `memoryBudget`: a size like "40GiB" (or a number of bytes) or a percentage like "80%". */
export function parseMemoryBudget(v: unknown, field: string): MemoryBudgetSetting | undefined {
  if (v === undefined) return undefined;
  const bad = (): Error => invalidArgument(field, `must be a size like "40GiB" (1 byte..2^53-1) or a percentage in (0%, 100%] like "80%", got ${JSON.stringify(v).slice(0, 64)}`);
  if (typeof v === "number") {
    if (!Number.isSafeInteger(v) || v < 1) throw bad();
    return { t: "bytes", bytes: v };
  }
  if (typeof v !== "string") throw bad();
  const pct = /^\s*(\d+(?:\.\d+)?)\s*%\s*$/.exec(v);
  if (pct !== null) {
    const percent = Number(pct[1]);
    if (!(percent > 0 && percent <= 100)) throw bad();
    return { t: "percent", percent };
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v);
  const unit = units[(m?.[2] ?? "?").toLowerCase()];
  if (m === null || unit === undefined) throw bad();
  const bytes = Math.round(Number(m[1]) * unit);
  if (!Number.isSafeInteger(bytes) || bytes < 1) throw bad();
  return { t: "bytes", bytes };
}

