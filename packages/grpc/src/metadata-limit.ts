import type { IncomingHttpHeaders } from "node:http2";
import type { Metadata } from "@grpc/grpc-js";
import { capExceeded, type WardenError } from "@warden/common";
import type { HandlerContext } from "./types.js";

/** Per-entry overhead of a header in an HTTP/2 header list (RFC 7540 §6.5.2). */
const entryOverheadBytes = 32;

function valueBytes(v: string | Buffer): number {
  return typeof v === "string" ? Buffer.byteLength(v) : v.length;
}

/** The header-list size of grpc-js metadata. */
export function metadataBytes(md: Metadata): number {
  let n = 0;
  for (const [k, v] of Object.entries(md.getMap())) n += k.length + valueBytes(v) + entryOverheadBytes;
  return n;
}

/** The header-list size of raw HTTP/2 request headers (pseudo-headers included). */
export function headerListBytes(headers: IncomingHttpHeaders): number {
  let n = 0;
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) n += k.length + Buffer.byteLength(x) + entryOverheadBytes;
    else n += k.length + Buffer.byteLength(v) + entryOverheadBytes;
  }
  return n;
}

/**
 * Whether raw request headers are within `maxBytes` by {@link headerListBytes}:
 * the same answer, but a list that cannot reach the limit (every UTF-16 unit
 * taken as 3 UTF-8 bytes, the most it can be) is passed without measuring
 * each value exactly — every call's headers are checked.
 */
export function headerListWithin(headers: IncomingHttpHeaders, maxBytes: number): boolean {
  let bound = 0;
  for (const k in headers) {
    const v = headers[k];
    if (v === undefined) continue;
    if (typeof v === "string") bound += k.length + 3 * v.length + entryOverheadBytes;
    else for (const x of v) bound += k.length + 3 * x.length + entryOverheadBytes;
  }
  return bound <= maxBytes || headerListBytes(headers) <= maxBytes;
}

export function metadataTooLarge(bytes: number, maxBytes: number): WardenError {
  return capExceeded("metadata", `request metadata of ${String(bytes)} bytes exceeds the ${String(maxBytes)}-byte limit`);
}

type AnyHandler = (input: unknown, ctx: HandlerContext) => unknown;

async function* failing(err: WardenError): AsyncGenerator<never> {
  yield* [];
  throw err;
}

/**
 * A handler that refuses a call whose request metadata is over `maxBytes`
 * before the handler runs (grpc-js has no such server option). The refusal
 * has the handler's own shape: a rejected promise for a single reply, a
 * failing stream for a reply stream.
 */
export function guardMetadata(streamsReplies: boolean, handler: AnyHandler, maxBytes: number): AnyHandler {
  return (input, ctx) => {
    const bytes = metadataBytes(ctx.metadata);
    if (bytes <= maxBytes) return handler(input, ctx);
    const err = metadataTooLarge(bytes, maxBytes);
    return streamsReplies ? failing(err) : Promise.reject(err);
  };
}
