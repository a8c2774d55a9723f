import { timingSafeEqual } from "node:crypto";
import type { Metadata } from "@grpc/grpc-js";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import type { RawUnaryHandler } from "./lean-server.js";
import type { HandlerContext, ServiceImpl } from "./types.js";

/** Longest `authorization` value read; a longer one is refused unread (no hashing of megabytes). */
export const maxAuthorizationChars = 1024;

/** The `authorization: Bearer <token>` header for a client's `headers` option. */
export function bearerMetadata(token: string): Readonly<Record<string, string>> {
  return { authorization: `Bearer ${token}` };
}

/**
 * The bearer token a call carries: undefined when there is no `authorization`
 * header, it is not the Bearer scheme, or it is longer than maxAuthorizationChars.
 */
export function bearerTokenOf(md: Metadata): string | undefined {
  const v = md.get("authorization")[0];
  if (typeof v !== "string" || v.length > maxAuthorizationChars || !v.startsWith("Bearer ")) return undefined;
  const token = v.slice("Bearer ".length).trim();
  return token === "" ? undefined : token;
}

/**
 * Checks one call before its handler runs: throws (a WardenError, usually
 * UNAUTHENTICATED or PERMISSION_DENIED) to refuse it. `request` is the decoded
 * request for unary and server-streaming methods, undefined for request streams.
 */
export type CallCheck = (method: DescMethod, ctx: HandlerContext, request: unknown) => void;

type AnyHandler = (input: unknown, ctx: HandlerContext) => unknown;

function failing(kind: DescMethod["methodKind"], err: unknown): unknown {
  const e = WardenError.from(err);
  if (kind === "unary" || kind === "client_streaming") return Promise.reject(e);
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => Promise.reject(e),
    }),
  };
}

/**
 * Wraps every handler of `impl` so `check` runs first; a refused call never
 * reaches the handler. Serves GrpcServer and LeanGrpcServer alike (both call
 * handlers with a HandlerContext), so auth lives in one place.
 */
export function guardService<T extends DescService>(svc: T, impl: ServiceImpl<T>, check: CallCheck): ServiceImpl<T> {
  const byName = impl as unknown as Record<string, AnyHandler>;
  const out: Record<string, AnyHandler> = {};
  for (const m of svc.methods) {
    const h = byName[m.localName];
    if (h === undefined) continue;
    out[m.localName] = (input, ctx) => {
      try {
        check(m, ctx, m.methodKind === "unary" || m.methodKind === "server_streaming" ? input : undefined);
      } catch (err) {
        return failing(m.methodKind, err);
      }
      return h(input, ctx);
    };
  }
  // Extra members (e.g. the inference service's predictBytes) pass through unchanged.
  return { ...impl, ...out };
}

/** A raw (bytes) unary handler with `check` first; `request` is undefined (the bytes are the handler's to read). */
export function guardRawUnary(method: DescMethod, handler: RawUnaryHandler, check: CallCheck): RawUnaryHandler {
  return async (bytes, ctx) => {
    check(method, ctx, undefined);
    return handler(bytes, ctx);
  };
}

/**
 * The check of a server holding one shared token, as LocalAI's backends do
 * with LOCALAI_GRPC_AUTH_TOKEN: every call (Health included) must carry
 * `authorization: Bearer <token>`, compared in constant time; otherwise
 * UNAUTHENTICATED "invalid token".
 */
export function sharedTokenCheck(token: string): CallCheck {
  const expected = Buffer.from(`Bearer ${token}`);
  return (_method, ctx) => {
    const got = ctx.metadata.get("authorization")[0];
    const b = Buffer.from(typeof got === "string" ? got : "");
    if (b.length !== expected.length || !timingSafeEqual(b, expected)) throw new WardenError(Code.Unauthenticated, "invalid token");
  };
}
