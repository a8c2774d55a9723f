import { invalidArgument, parseDurationMs } from "@warden/common";
import { parseAllowedHosts } from "./host-check.js";
import { parsePromptTemplates, type PromptTemplate } from "./prompt-template.js";

/**
 * The coordinator's HTTP listener (the OpenAI-compatible API and whatever
 * else registers routes on it): YAML `httpListen` and `http:`. Every knob
 * has its default and range in `httpSettingBounds`; out of range is
 * INVALID_ARGUMENT naming the field.
 */
export interface HttpSettings {
  /** host:port of the HTTP listener; undefined = off (the default; `warden up` turns it on at 127.0.0.1:8080). */
  readonly httpListen: string | undefined;
  readonly http: HttpLimits;
  /** Each model's `promptTemplate`, by model id (prompt-template.ts): chat is templated here for these. */
  readonly promptTemplates: Readonly<Record<string, PromptTemplate>>;
}

export interface HttpLimits {
  /** Largest request body (JSON or multipart upload). @default 32 MiB */
  readonly bodyLimitBytes: number;
  /** Time allowed to receive a whole request, headers and body (Node's requestTimeout). @default 5 min */
  readonly requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. @default 5 s */
  readonly keepAliveTimeoutMs: number;
  /**
   * A connection with no bytes either way for this long is closed (0 = never).
   * Longer than a model load: a non-streamed call sends nothing while it waits. @default 15 min
   */
  readonly connectionTimeoutMs: number;
  /** Open connections at once; past it new ones are refused. @default 1024 */
  readonly maxConnections: number;
  /** Open connections from one IP address; past it its new ones are closed at once, so one peer cannot take every slot. @default 64 */
  readonly maxConnectionsPerPeer: number;
  /** Time allowed to receive a request's headers (Node's headersTimeout; at most requestTimeout). @default 30 s */
  readonly headersTimeoutMs: number;
  /** Time allowed for a TLS handshake (HTTPS only). @default 10 s */
  readonly handshakeTimeoutMs: number;
  /** A whole API call (load on demand included) is cancelled after this. @default 10 min */
  readonly callTimeoutMs: number;
  /** Host names answered with auth off besides the loopback ones and the listen host (host-check.ts). @default [] */
  readonly allowedHosts: readonly string[];
}

const mib = 1024 * 1024;
const minute = 60_000;

/** Each `http:` knob's YAML name, default and range (ms for durations, bytes for sizes). */
export const httpSettingBounds = Object.freeze({
  bodyLimit: { field: "bodyLimitBytes", dflt: 32 * mib, min: 1024, max: 1024 * mib },
  requestTimeout: { field: "requestTimeoutMs", dflt: 5 * minute, min: 1_000, max: 60 * minute },
  keepAliveTimeout: { field: "keepAliveTimeoutMs", dflt: 5_000, min: 1_000, max: 10 * minute },
  connectionTimeout: { field: "connectionTimeoutMs", dflt: 15 * minute, min: 0, max: 24 * 60 * minute },
  maxConnections: { field: "maxConnections", dflt: 1024, min: 1, max: 65_536 },
  maxConnectionsPerPeer: { field: "maxConnectionsPerPeer", dflt: 64, min: 1, max: 65_536 },
  headersTimeout: { field: "headersTimeoutMs", dflt: 30_000, min: 1_000, max: 10 * minute },
  handshakeTimeout: { field: "handshakeTimeoutMs", dflt: 10_000, min: 1_000, max: 5 * minute },
  callTimeout: { field: "callTimeoutMs", dflt: 10 * minute, min: 1_000, max: 24 * 60 * minute },
} as const);

export const httpSettingsFields = ["httpListen", "http"] as const;

export const defaultHttpLimits: HttpLimits = Object.freeze({ ...(Object.fromEntries(Object.values(httpSettingBounds).map((b) => [b.field, b.dflt])) as unknown as HttpLimits), allowedHosts: [] });

const sizeUnits: Readonly<Record<string, number>> = { "": 1, b: 1, kib: 1024, mib, gib: 1024 * mib, kb: 1e3, mb: 1e6, gb: 1e9 };

function size(v: unknown, field: string): number {
  if (typeof v === "number" && Number.isInteger(v) && v >= 0) return v;
  const m = typeof v === "string" ? /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v) : null;
  const unit = sizeUnits[(m?.[2] ?? "?").toLowerCase()];
  if (m === null || unit === undefined) throw invalidArgument(field, `must be a size like "32MiB", got ${JSON.stringify(v)}`);
  return Math.round(Number(m[1]) * unit);
}

function inRange(n: number, field: string, b: { readonly min: number; readonly max: number }, show: (n: number) => string): number {
  if (n < b.min || n > b.max) throw invalidArgument(field, `must be in [${show(b.min)}, ${show(b.max)}], got ${show(n)}`);
  return n;
}

/** Reads `httpListen` and `http:` from a config already checked to be a map. */
export function parseHttpSettings(input: Readonly<Record<string, unknown>>): HttpSettings {
  const listen = input["httpListen"];
  if (listen !== undefined && (typeof listen !== "string" || listen === "" || listen.length > 512)) throw invalidArgument("httpListen", `must be host:port, got ${JSON.stringify(listen)}`);
  if (typeof listen === "string") {
    const colon = listen.lastIndexOf(":");
    const port = Number(listen.slice(colon + 1));
    if (colon <= 0 || !Number.isInteger(port) || port < 0 || port > 65_535) throw invalidArgument("httpListen", `must be host:port, got ${JSON.stringify(listen)}`);
  }
  const h = input["http"] ?? {};
  if (typeof h !== "object" || Array.isArray(h)) throw invalidArgument("http", "must be a map");
  const r = h as Record<string, unknown>;
  const names = [...Object.keys(httpSettingBounds), "allowedHosts"];
  for (const k of Object.keys(r)) if (!names.includes(k)) throw invalidArgument(`http.${k}`, `unknown field (allowed: ${names.join(", ")})`);
  const out: Record<string, number> = { ...(defaultHttpLimits as unknown as Record<string, number>) };
  for (const [name, b] of Object.entries(httpSettingBounds)) {
    const v = r[name];
    if (v === undefined) continue;
    const field = `http.${name}`;
    if (name === "bodyLimit") out[b.field] = inRange(size(v, field), field, b, (n) => `${String(n)} bytes`);
    else if (name === "maxConnections" || name === "maxConnectionsPerPeer") {
      if (typeof v !== "number" || !Number.isInteger(v)) throw invalidArgument(field, `must be an integer, got ${JSON.stringify(v)}`);
      out[b.field] = inRange(v, field, b, String);
    } else {
      if (typeof v !== "string" && typeof v !== "number") throw invalidArgument(field, `must be a duration like "30s", got ${JSON.stringify(v)}`);
      out[b.field] = inRange(parseDurationMs(v, field), field, b, (n) => `${String(n)}ms`);
    }
  }
  // Node refuses a headers timeout longer than the request timeout it is part of: the default follows a shorter requestTimeout, a set one is refused.
  const requestMs = out["requestTimeoutMs"] ?? 0;
  if ((out["headersTimeoutMs"] ?? 0) > requestMs) {
    if (r["headersTimeout"] !== undefined) throw invalidArgument("http.headersTimeout", `must be at most http.requestTimeout (${String(requestMs)}ms), got ${String(out["headersTimeoutMs"])}ms`);
    out["headersTimeoutMs"] = requestMs;
  }
  const models = input["models"];
  return { httpListen: listen, http: { ...(out as unknown as HttpLimits), allowedHosts: parseAllowedHosts(r["allowedHosts"]) }, promptTemplates: parsePromptTemplates(Array.isArray(models) ? models : []) };
}
