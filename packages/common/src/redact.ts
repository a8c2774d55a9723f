/** What a redacted value is replaced with. */
export const redacted = "[redacted]";

/**
 * Keys whose string values are secrets wherever they appear in a log line:
 * tokens, passwords, keys, credentials and authorization metadata (any case,
 * any prefix: `natsToken`, `authToken`, `x-api-key`). Booleans and numbers
 * under such keys (`backendToken: true`, `tokens: 3`) are not secrets and stay.
 */
const secretKey = /(authorization|token|passw(or)?d|^pass$|secret|api[-_]?key|private[-_]?key|^key$|credentials?|^creds$|cookie)$/i;

/** Secrets inside free text: a bearer credential, or a Warden token (wdn_…). */
const secretText = /(Bearer\s+)[^\s"',;]+|wdn_[A-Za-z0-9_-]{8,}/g;

const maxDepth = 8;

/** `s` with bearer credentials and Warden tokens replaced. */
export function redactText(s: string): string {
  if (!s.includes("Bearer") && !s.includes("wdn_")) return s;
  return s.replace(secretText, (_m, bearer: string | undefined) => (bearer === undefined ? `wdn_${redacted}` : `${bearer}${redacted}`));
}

function redactValue(v: unknown, depth: number): unknown {
  if (typeof v === "string") return redactText(v);
  if (typeof v !== "object" || v === null || depth > maxDepth) return v;
  if (v instanceof Error) {
    const message = redactText(v.message);
    const stack = v.stack === undefined ? undefined : redactText(v.stack);
    if (message === v.message && stack === v.stack) return v;
    // Still an Error, so the logger's error serializer shows it as one.
    const e = new Error(message);
    e.name = v.name;
    e.stack = stack;
    return e;
  }
  if (Array.isArray(v)) return v.map((x) => redactValue(x, depth + 1));
  if (Buffer.isBuffer(v) || ArrayBuffer.isView(v)) return v;
  return redactFields(v as Record<string, unknown>, depth + 1);
}

/**
 * A copy of a log line's fields with secrets replaced by "[redacted]" (keys
 * per `secretKey`, bearer and Warden tokens inside any string), to `maxDepth`
 * levels. The object itself is left as it was.
 */
export function redactFields(obj: Record<string, unknown>, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (secretKey.test(k) && (typeof v === "string" || (typeof v === "object" && v !== null && !Array.isArray(v) && k.toLowerCase().startsWith("cred")))) out[k] = redacted;
    else out[k] = redactValue(v, depth);
  }
  return out;
}
