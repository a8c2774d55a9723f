import { checkIdentifier, invalidArgument, parseDurationMs } from "@warden/common";

/*
 * Readers of the agent config's fields (agent-config.ts, catalog-entry.ts):
 * each checks one value and throws INVALID_ARGUMENT naming `field`.
 */

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function rejectUnknown(obj: Record<string, unknown>, allowed: ReadonlySet<string>, path: string): void {
  for (const k of Object.keys(obj)) {
    if (!allowed.has(k)) throw invalidArgument(path === "" ? k : `${path}.${k}`, `unknown field (allowed: ${[...allowed].join(", ")})`);
  }
}

export function str(v: unknown, field: string, dflt?: string): string {
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== "string") throw invalidArgument(field, v === undefined ? "required" : "must be a string");
  return v;
}

export function id(v: unknown, field: string, dflt?: string): string {
  return checkIdentifier(field, str(v, field, dflt));
}

/** A duration field; `maxMs` is its documented maximum (@warden/common limits.ts). */
export function duration(v: unknown, field: string, dfltMs: number, maxMs: number): number {
  if (v === undefined) return dfltMs;
  if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, 'must be a duration like "10s"');
  return parseDurationMs(v, field, maxMs);
}

export function int(v: unknown, field: string, dflt: number | undefined, min: number, max: number): number {
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v)) throw invalidArgument(field, v === undefined ? "required" : "must be an integer");
  if (v < min || v > max) throw invalidArgument(field, `must be in ${String(min)}..${String(max)}, got ${String(v)}`);
  return v;
}

export function hostPort(v: unknown, field: string, dflt?: string): string {
  const s = str(v, field, dflt);
  if (!/^[A-Za-z0-9.\-[\]:]+:\d{1,5}$/.test(s)) throw invalidArgument(field, `must be host:port, got "${s}"`);
  return s;
}

export function stringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined) return {};
  if (!isRecord(v)) throw invalidArgument(field, "must be a map of strings");
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== "string") throw invalidArgument(`${field}.${k}`, "must be a string");
    out[k] = val;
  }
  return out;
}

export function stringList(v: unknown, field: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw invalidArgument(field, "must be a list of strings");
  return v.map((x: unknown, i) => str(x, `${field}[${String(i)}]`));
}
export function flag(v: unknown, field: string, byDefault: boolean): boolean {
  if (v === undefined) return byDefault;
  if (typeof v !== "boolean") throw invalidArgument(field, `must be true or false, got ${JSON.stringify(v)}`);
  return v;
}
