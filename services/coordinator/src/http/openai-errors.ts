import { codeName, type WardenError } from "@warden/common";
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

function typeOf(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  if (status < 500) return "invalid_request_error";
  return status === 503 ? "service_unavailable_error" : "server_error";
}

/** `model: "x" is not configured` → `"x" is not configured`: the field goes to `param`, the text reads on its own. */
function messageOf(e: WardenError, param: string | null): string {
  const m = e.rawMessage;
  return param !== null && m.startsWith(`${param}: `) ? m.slice(param.length + 2) : m;
}

/** The JSON an HTTP caller gets for `e`; `param` is the field a validation error names. */
export function errorBody(e: WardenError): OpenAiErrorBody {
  const status = httpStatusOf(e);
  const field = e.details["field"];
  const param = typeof field === "string" ? field : null;
  const code = status === 404 && param === "model" ? "model_not_found" : codeName(e.code);
  return { error: { message: messageOf(e, param), type: typeOf(status), param, code } };
}
