import { Metadata, type ServerUnaryCall, type ServerWritableStream, type ServerDuplexStream, type ServerReadableStream, type UntypedHandleCall, type sendUnaryData } from "@grpc/grpc-js";
import type { DescMethod } from "@bufbuild/protobuf";
import type { PeerCertificate } from "node:tls";
import { Code, WardenError, deadlineTimer, type Cancel } from "@warden/common";
import { toGrpcStatus } from "./codes.js";
import { UndecodableRequest } from "./request-decode.js";
import { RequestIterator } from "./request-iterator.js";
import { RequestEvents } from "./request-events.js";
import { isPushReplies, pushedRequests, startReplies } from "./push-stream.js";
import type { HandlerContext } from "./types.js";
import { peerCertificateOf, type PeerCertificateSource } from "./peer-identity.js";

/** The abort reason of a call that completed; shared so no stack trace is captured per call. */
const callCompleted = new WardenError(Code.Canceled, "call completed");

/** The part of every grpc-js server call that scope() uses. */
interface AnyCall {
  on(event: "cancelled", fn: () => void): unknown;
  removeListener(event: "cancelled", fn: () => void): unknown;
  getDeadline(): Date | number;
  getPeer(): string;
  getAuthContext(): { sslPeerCertificate?: PeerCertificate } | null;
  readonly metadata: Metadata;
}

interface CallScope {
  ctx: HandlerContext;
  /** Aborts the call's signal with `reason` (completion by default); idempotent. */
  finish(reason?: WardenError): void;
}

/**
 * Builds the handler context; its signal fires on client cancel, deadline and
 * completion. `live` (the server's) holds it while the call runs, so a forced
 * shutdown can end it UNAVAILABLE first.
 */
function scope(call: AnyCall, live: Set<AbortController> | undefined): CallScope {
  const ctl = new AbortController();
  live?.add(ctl);
  const deadline = call.getDeadline();
  const deadlineAtMs = deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? deadline : undefined;
  let cancelTimer: Cancel | undefined;
  const onCancel = (): void => {
    const expired = deadlineAtMs !== undefined && Date.now() >= deadlineAtMs - 5;
    ctl.abort(new WardenError(expired ? Code.DeadlineExceeded : Code.Canceled, expired ? "call deadline exceeded" : "call cancelled by the client"));
  };
  call.on("cancelled", onCancel);
  if (deadlineAtMs !== undefined) {
    // grpc-js also emits "cancelled" on deadline; this timer makes it explicit and typed.
    cancelTimer = deadlineTimer(deadlineAtMs - Date.now(), () => {
      ctl.abort(new WardenError(Code.DeadlineExceeded, "call deadline exceeded"));
    });
  }
  const ctx: HandlerContext & PeerCertificateSource = {
    signal: ctl.signal,
    metadata: call.metadata,
    peer: call.getPeer(),
    deadlineAtMs,
    responseHeader: new Metadata(),
    responseTrailer: new Metadata(),
    // Read only when a handler asks (peerIdentity): most calls never do.
    [peerCertificateOf]: () => call.getAuthContext()?.sslPeerCertificate,
  };
  return {
    ctx,
    finish(reason = callCompleted) {
      live?.delete(ctl);
      cancelTimer?.();
      call.removeListener("cancelled", onCancel);
      if (!ctl.signal.aborted) ctl.abort(reason);
    },
  };
}

function hasEntries(md: Metadata): boolean {
  return Object.keys(md.getMap()).length > 0;
}

async function writeAll(call: ServerWritableStream<unknown, unknown> | ServerDuplexStream<unknown, unknown>, source: AsyncIterable<unknown>, ctx: HandlerContext): Promise<void> {
  let headerSent = false;
  for await (const msg of source) {
    if (ctx.signal.aborted) break;
    if (!headerSent) {
      headerSent = true;
      if (hasEntries(ctx.responseHeader)) call.sendMetadata(ctx.responseHeader);
    }
    if (!call.write(msg)) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          call.removeListener("drain", done);
          ctx.signal.removeEventListener("abort", done);
          resolve();
        };
        call.once("drain", done);
        ctx.signal.addEventListener("abort", done, { once: true });
      });
    }
  }
  if (!headerSent && hasEntries(ctx.responseHeader)) call.sendMetadata(ctx.responseHeader);
}

/** The request side of a streaming call: pulled (request-iterator.ts), or read by events by a handler that can (request-events.ts). */
function requestsOf(call: ServerDuplexStream<unknown, unknown> | ServerReadableStream<unknown, unknown>, undecodable: (err: WardenError) => void): AsyncIterable<unknown> {
  const requests = pushedRequests<unknown>((sink) => new RequestEvents(call, undecodable, sink));
  return {
    ...requests,
    [Symbol.asyncIterator]: () => new RequestIterator(call, undecodable),
  };
}

type AnyHandler = (input: unknown, ctx: HandlerContext) => unknown;

/**
 * Wraps a typed handler into the grpc-js handler for its method kind. A
 * request that did not decode (an `UndecodableRequest` from the server's
 * lenient deserializer) is answered with its INVALID_ARGUMENT: before the
 * handler runs for a single request, when the handler reads it for a request
 * stream (the handler's own outcome is then ignored and its signal fires
 * with that error).
 */
export function wrapHandler(method: DescMethod, handler: AnyHandler, live?: Set<AbortController>): UntypedHandleCall {
  switch (method.methodKind) {
    case "unary":
      return (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => {
        if (call.request instanceof UndecodableRequest) {
          callback(toGrpcStatus(call.request.error));
          return;
        }
        const s = scope(call, live);
        (handler(call.request, s.ctx) as Promise<unknown>).then(
          (res) => {
            if (hasEntries(s.ctx.responseHeader)) call.sendMetadata(s.ctx.responseHeader);
            callback(null, res, s.ctx.responseTrailer);
            s.finish();
          },
          (err: unknown) => {
            callback(toGrpcStatus(err, s.ctx.responseTrailer));
            s.finish();
          },
        );
      };
    case "server_streaming":
      return (call: ServerWritableStream<unknown, unknown>) => {
        if (call.request instanceof UndecodableRequest) {
          call.emit("error", toGrpcStatus(call.request.error));
          return;
        }
        const s = scope(call, live);
        writeAll(call, handler(call.request, s.ctx) as AsyncIterable<unknown>, s.ctx).then(
          () => {
            call.end(s.ctx.responseTrailer);
            s.finish();
          },
          (err: unknown) => {
            call.emit("error", toGrpcStatus(err, s.ctx.responseTrailer));
            s.finish();
          },
        );
      };
    case "bidi_streaming":
      return (call: ServerDuplexStream<unknown, unknown>) => {
        const s = scope(call, live);
        let answered = false;
        // The handler failed, or (with the error as the signal's reason) a request did not decode.
        const fail = (err: unknown, undecodable?: WardenError): void => {
          if (answered) return;
          answered = true;
          call.emit("error", toGrpcStatus(err, s.ctx.responseTrailer));
          s.finish(undecodable);
        };
        const done = (): void => {
          if (answered) return;
          answered = true;
          call.end(s.ctx.responseTrailer);
          s.finish();
        };
        const replies = handler(requestsOf(call, (e) => { fail(e, e); }), s.ctx) as AsyncIterable<unknown>;
        if (isPushReplies(replies)) {
          // Driven by events: nothing pending between two messages (push-stream.ts).
          let headerSent = false;
          startReplies(replies, {
            reply: (msg) => {
              if (answered || s.ctx.signal.aborted) return;
              if (!headerSent) {
                headerSent = true;
                if (hasEntries(s.ctx.responseHeader)) call.sendMetadata(s.ctx.responseHeader);
              }
              call.write(msg);
            },
            end: () => {
              if (!headerSent && !answered && hasEntries(s.ctx.responseHeader)) call.sendMetadata(s.ctx.responseHeader);
              done();
            },
            fail,
          });
          return;
        }
        writeAll(call, replies, s.ctx).then(done, fail);
      };
    case "client_streaming":
      return (call: ServerReadableStream<unknown, unknown>, callback: sendUnaryData<unknown>) => {
        const s = scope(call, live);
        let answered = false;
        // The handler failed, or (with the error as the signal's reason) a request did not decode.
        const fail = (err: unknown, undecodable?: WardenError): void => {
          if (answered) return;
          answered = true;
          callback(toGrpcStatus(err, s.ctx.responseTrailer));
          s.finish(undecodable);
        };
        (handler(requestsOf(call, (e) => { fail(e, e); }), s.ctx) as Promise<unknown>).then((res) => {
          if (answered) return;
          answered = true;
          callback(null, res, s.ctx.responseTrailer);
          s.finish();
        }, fail);
      };
  }
}
