import { invalidArgument } from "./errors.js";
import { maxDurationMs } from "./limits.js";

const unitMs: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

const part = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;

function atMost(ms: number, field: string, maxMs: number): number {
  if (ms > maxMs) throw invalidArgument(field, `duration must be at most ${formatDurationMs(maxMs)} (${String(maxMs)}ms), got ${String(ms)}ms`);
  return ms;
}

/**
 * Parses a duration such as `"15m"`, `"1h30m"`, `"500ms"` or `"2.5s"` into
 * milliseconds. A bare non-negative number is taken as milliseconds. Anything
 * else (negative, NaN, empty, unknown unit) or a value above `maxMs` (default
 * {@link maxDurationMs}, 30 days) throws INVALID_ARGUMENT naming `field`.
 */
export function parseDurationMs(value: string | number, field: string, maxMs: number = maxDurationMs): number {
  if (typeof value === "number") {
    if (!Number.isFinite(value) || value < 0) throw invalidArgument(field, `duration must be a finite number >= 0, got ${String(value)}`);
    return atMost(value, field, maxMs);
  }
  const text = value.trim();
  if (text === "") throw invalidArgument(field, "duration is empty");
  if (/^\d+(\.\d+)?$/.test(text)) return atMost(Number(text), field, maxMs);
  let total = 0;
  part.lastIndex = 0;
  while (part.lastIndex < text.length) {
    const at = part.lastIndex;
    const m = part.exec(text);
    if (m === null) throw invalidArgument(field, `invalid duration "${value}" at offset ${String(at)}; use e.g. "500ms", "30s", "15m", "1h30m"`);
    total += Number(m[1]) * (unitMs[m[2] ?? ""] ?? Number.NaN);
  }
  if (!Number.isFinite(total)) throw invalidArgument(field, `invalid duration "${value}"`);
  return atMost(Math.round(total), field, maxMs);
}

/**
 * A uint64 millisecond field of a request (protobuf-es gives a bigint) as a
 * number, range-checked before the conversion: `Number(2n ** 64n - 1n)` is not
 * the same value and would not even encode back as a uint64. Throws
 * INVALID_ARGUMENT naming `field` outside `[minMs, maxMs]`.
 */
export function durationMsFromUint64(value: bigint, field: string, maxMs: number, minMs = 0): number {
  if (value < BigInt(minMs) || value > BigInt(maxMs)) {
    throw invalidArgument(field, `must be in [${String(minMs)}, ${String(maxMs)}] ms (at most ${formatDurationMs(maxMs)}), got ${value.toString()}`);
  }
  return Number(value);
}

/** Formats milliseconds for people: `1h2m3s`, `450ms`. */
export function formatDurationMs(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms < 1000) return `${String(Math.round(ms))}ms`;
  let rest = Math.round(ms / 1000);
  const h = Math.floor(rest / 3600);
  rest -= h * 3600;
  const m = Math.floor(rest / 60);
  const s = rest - m * 60;
  return `${h > 0 ? `${String(h)}h` : ""}${m > 0 ? `${String(m)}m` : ""}${s > 0 || (h === 0 && m === 0) ? `${String(s)}s` : ""}`;
}
