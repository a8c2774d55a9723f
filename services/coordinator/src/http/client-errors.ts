import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { Code, WardenError } from "@warden/common";
import { httpStatusOfCode } from "./http-status.js";
import { securityHeaders } from "./security-headers.js";

/**
 * Errors raised while a request is read (fastify's body parsers, the
 * multipart reader) as the one WardenError every HTTP route answers with.
 * A malformed request is the client's fault and gets a 4xx: 400 for a body
 * that does not parse, 413 past a size limit, 415 for a content type no
 * route reads. Only what is the server's own (a full disk, a bug) stays 5xx.
 */
export function requestError(err: unknown): WardenError {
  if (err instanceof WardenError) return err;
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  const message = err instanceof Error ? err.message : String(err);
  if (typeof status !== "number" || status < 400 || status >= 500) return WardenError.from(err, Code.Internal);
  if (status === 413) return new WardenError(Code.ResourceExhausted, `body: ${message} (request body larger than a limit: http.bodyLimit, or the route's own)`, { cause: err, details: { field: "body", httpStatus: 413 } });
  if (status === 415) return new WardenError(Code.InvalidArgument, `content-type: ${message} (send application/json, or multipart/form-data where a file is uploaded)`, { cause: err, details: { field: "content-type", httpStatus: 415 } });
  // 406 is what the multipart reader says of a field it cannot parse: the body is bad, not the Accept header.
  return new WardenError(Code.InvalidArgument, message, { cause: err, details: { field: "body", httpStatus: status === 406 ? 400 : status } });
}

/**
 * An error met while reading a multipart upload: the parser's own errors
 * (a truncated body, no boundary, a part that ends early) carry no status
 * and are the client's (400); a file system error writing the upload (it
 * has a `syscall`) stays the server's.
 */
export function multipartError(err: unknown): WardenError {
  if (err instanceof WardenError) return err;
  const e = err as { statusCode?: unknown; syscall?: unknown } | null;
  if (typeof e?.statusCode === "number" || typeof e?.syscall === "string") return requestError(err);
  const message = err instanceof Error ? err.message : String(err);
  return new WardenError(Code.InvalidArgument, `body: malformed multipart/form-data: ${message}`, { cause: err, details: { field: "body" } });
}

/** The HTTP status of `e`: an explicit `details.httpStatus` (413, 415, 421) wins over the code's. */
export function httpStatusWithExplicit(e: WardenError, failedPrecondition: 409 | 503): number {
  const explicit = e.details["httpStatus"];
  if (typeof explicit === "number" && Number.isInteger(explicit) && explicit >= 400 && explicit <= 599) return explicit;
  return httpStatusOfCode(e.code, failedPrecondition);
}

/**
 * The answer to a request Node's HTTP parser refused before any route saw it
 * (a malformed request line or header, headers past the size limit, a
 * request that took too long): fastify's clientErrorHandler, as its default
 * (408, 431 or 400, then the socket closes) but with the listener's security
 * headers and its JSON error shape.
 */
export function answerUnparsedRequest(err: NodeJS.ErrnoException, socket: Duplex, tls: boolean): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const [status, message] = err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? [408, "the request took longer than http.requestTimeout"] : err.code === "HPE_HEADER_OVERFLOW" ? [431, "the request's headers are larger than the limit (16 KiB)"] : [400, "the request is not valid HTTP/1.1"];
  const body = JSON.stringify({ error: { message, type: "invalid_request_error", param: null, code: null } });
  const headers = Object.entries({ ...securityHeaders(tls), "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), connection: "close" }).map(([k, v]) => `${k}: ${v}\r\n`);
  if (socket.writable) socket.write(`HTTP/1.1 ${String(status)} ${STATUS_CODES[status] ?? ""}\r\n${headers.join("")}\r\n${body}`);
  socket.destroy(err);
}
