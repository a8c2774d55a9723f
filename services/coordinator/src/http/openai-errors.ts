import { Code, type WardenError } from "@warden/common";
import { httpStatusOfCode } from "./http-status.js";

/** OpenAI's error body: `{ error: { message, type, param, code } }`. */
export interface OpenAiErrorBody {
  readonly error: { readonly message: string; readonly type: string; readonly param: string | null; readonly code: string | null };
}

/** The HTTP status for a Warden error code (an explicit `details.httpStatus` wins: 413, 415). */
export function httpStatusOf(e: WardenError): number {
  const explicit = e.details["httpStatus"];
  if (typeof explicit === "number" && Number.isInteger(explicit) && explicit >= 400 && explicit <= 599) return explicit;
  return httpStatusOfCode(e.code, 503);
}

/**
 * The `type` OpenAI's API sends: `invalid_request_error` for every refusal
 * of the request (400, 404 — an unknown model included —, 401 and 403 too:
 * OpenAI answers a wrong key `invalid_request_error` / `invalid_api_key`,
 * and its client libraries tell those apart by the status), `requests` for
 * a request-rate 429, `server_error` for 5xx.
 */
function typeOf(status: number): string {
  if (status === 429) return "requests";
  return status < 500 ? "invalid_request_error" : "server_error";
}

/**
 * The `code` OpenAI's API sends, or null where it has none: never a gRPC
 * code name (clients match these strings). An explicit
 * `details.openAiCode` (missing_required_parameter) wins.
 */
function codeOf(e: WardenError, status: number, param: string | null): string | null {
  const explicit = e.details["openAiCode"];
  if (typeof explicit === "string") return explicit;
  if (status === 401) return "invalid_api_key";
  // A model that is not configured, or that this token may not use (OpenAI: 404, or 403 for a project without access).
  if ((status === 404 || status === 403) && param === "model") return "model_not_found";
  if (status === 429) return "rate_limit_exceeded";
  return null;
}

/**
 * The message names the field it is about, in the message itself: clients
 * show the message alone (LangChain: `400 model: is required`), not `param`.
 */
function messageOf(e: WardenError, param: string | null): string {
  const m = e.rawMessage;
  return param === null || m.startsWith(`${param}:`) ? m : `${param}: ${m}`;
}

/** The JSON an HTTP caller gets for `e`; `param` is the field a validation error names. */
export function errorBody(e: WardenError): OpenAiErrorBody {
  const status = httpStatusOf(e);
  const field = e.details["field"];
  const param = typeof field === "string" ? field : null;
  return { error: { message: messageOf(e, param), type: typeOf(status), param, code: codeOf(e, status, param) } };
}

/**
 * Seconds for `Retry-After` on an UNAVAILABLE answer (a load that waited
 * `loadWait` for a node, no node ready yet): the error's `details.retryAfterS`,
 * else 1; on a RESOURCE_EXHAUSTED (429) that carries `details.retryAfterS` (a
 * saturated model's admission queue), that. undefined for every other error —
 * retrying will not help.
 */
export function retryAfterOf(e: WardenError): number | undefined {
  if (e.code === Code.ResourceExhausted) {
    const r = e.details["retryAfterS"];
    return typeof r === "number" && Number.isInteger(r) && r >= 0 && r <= 3600 ? r : undefined;
  }
  if (e.code !== Code.Unavailable) return undefined;
  const s = e.details["retryAfterS"];
  return typeof s === "number" && Number.isInteger(s) && s >= 1 && s <= 3600 ? s : 1;
}
