/** Renders a rejected input for an error message without `[object Object]` and without echoing huge strings. */
export function describeValue(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v.length > 64 ? `${v.slice(0, 64)}…` : v);
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint" || v === undefined || v === null) return String(v);
  return Array.isArray(v) ? "a list" : `a ${typeof v}`;
}
