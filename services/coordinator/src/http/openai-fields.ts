import { Code, WardenError, invalidArgument } from "@warden/common";

/**
 * Field readers for OpenAI request bodies: each checks one value's type and
 * bound and throws INVALID_ARGUMENT naming its path (`messages[2].content`),
 * which becomes the 400's `param`.
 */
export type Body = Readonly<Record<string, unknown>>;

/** A required field that is absent: 400 with OpenAI's code `missing_required_parameter`. */
export function missing(field: string, what = "is required"): WardenError {
  return new WardenError(Code.InvalidArgument, `${field}: ${what}`, { details: { field, openAiCode: "missing_required_parameter" } });
}

export function isRecord(v: unknown): v is Body {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function bodyOf(v: unknown): Body {
  if (!isRecord(v)) throw invalidArgument("body", "must be a JSON object");
  return v;
}

export function optString(v: unknown, field: string, maxChars: number, minChars = 0): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw invalidArgument(field, `must be a string, got ${typeof v}`);
  if (v.length < minChars) throw invalidArgument(field, minChars === 1 ? "must not be empty" : `at least ${String(minChars)} characters`);
  if (v.length > maxChars) throw invalidArgument(field, `longer than ${String(maxChars)} characters`);
  return v;
}

export function reqString(v: unknown, field: string, maxChars: number): string {
  const s = optString(v, field, maxChars, 1);
  if (s === undefined) throw missing(field);
  return s;
}

export function optNumber(v: unknown, field: string, min: number, max: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v)) throw invalidArgument(field, "must be a number");
  if (v < min || v > max) throw invalidArgument(field, `must be in [${String(min)}, ${String(max)}], got ${String(v)}`);
  return v;
}

export function optInt(v: unknown, field: string, min: number, max: number): number | undefined {
  const n = optNumber(v, field, min, max);
  if (n !== undefined && !Number.isInteger(n)) throw invalidArgument(field, `must be an integer, got ${String(n)}`);
  return n;
}

export function optBool(v: unknown, field: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw invalidArgument(field, "must be true or false");
  return v;
}

export function optEnum<T extends string>(v: unknown, field: string, allowed: readonly T[]): T | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string" || !(allowed as readonly string[]).includes(v)) throw invalidArgument(field, `must be one of ${allowed.map((a) => JSON.stringify(a)).join(", ")}`);
  return v as T;
}

export function list(v: unknown, field: string, maxEntries: number, minEntries = 0): readonly unknown[] {
  if (v === undefined || v === null) throw missing(field);
  if (!Array.isArray(v)) throw invalidArgument(field, "must be a list");
  if (v.length < minEntries) throw invalidArgument(field, minEntries === 1 ? "must not be empty" : `at least ${String(minEntries)} entries`);
  if (v.length > maxEntries) throw invalidArgument(field, `at most ${String(maxEntries)} entries, got ${String(v.length)}`);
  return v;
}

/** A JSON value passed through to the backend as text (tools, tool_choice), bounded by its serialized size. */
export function optJson(v: unknown, field: string, maxChars: number): string | undefined {
  if (v === undefined || v === null) return undefined;
  const s = typeof v === "string" ? v : JSON.stringify(v);
  if (s.length > maxChars) throw invalidArgument(field, `longer than ${String(maxChars)} characters as JSON`);
  return s;
}
