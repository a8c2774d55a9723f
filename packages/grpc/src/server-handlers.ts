import { Metadata, type ServerUnaryCall, type ServerWritableStream, type ServerDuplexStream, type ServerReadableStream, type UntypedHandleCall, type sendUnaryData } from "@grpc/grpc-js";
import type { DescMethod } from "@bufbuild/protobuf";
import type { PeerCertificate } from "node:tls";
import { Code, WardenError, deadlineTimer, type Cancel } from "@warden/common";
import { toGrpcStatus } from "./codes.js";
import { UndecodableRequest } from "./request-decode.js";
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
  /** The response header / trailer metadata, undefined when no handler read (so set) them. */
  header(): Metadata | undefined;
  trailer(): Metadata | undefined;
}

/** What a forced shutdown ends: every running call's signal (GrpcServer's `live` set). */
export interface LiveCall {
  abort(reason: WardenError): void;
}

/**
 * Builds the handler context; its signal fires on client cancel, deadline and
 * completion. `live` (the server's) holds the call while it runs, so a forced
 * shutdown can end it UNAVAILABLE first.
 *
 * The signal (its AbortController, its deadline timer, the abort event on
 * completion) is made only when a handler first reads `ctx.signal`: most
 * unary calls (a heartbeat) never do, and those objects were a large share of
 * such a call's cost. Read late, it is made already aborted with the reason
 * the call ended for (the first one, as an AbortController keeps), or with
 * DEADLINE_EXCEEDED when the deadline has passed: what a handler observes is
 * the same as when it was made up front.
 */
function scope(call: AnyCall, live: Set<LiveCall> | undefined): CallScope {
  let ctl: AbortController | undefined;
  /** Why the call ended (cancel, deadline, completion, shutdown): the first reason wins. */
  let ended: WardenError | undefined;
  const deadline = call.getDeadline();
  const deadlineAtMs = deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? deadline : undefined;
  let cancelTimer: Cancel | undefined;
  const end = (reason: WardenError): void => {
    if (ended !== undefined) return;
    ended = reason;
    ctl?.abort(reason);
  };
  const handle: LiveCall = { abort: end };
  live?.add(handle);
  const onCancel = (): void => {
    const expired = deadlineAtMs !== undefined && Date.now() >= deadlineAtMs - 5;
    end(new WardenError(expired ? Code.DeadlineExceeded : Code.Canceled, expired ? "call deadline exceeded" : "call cancelled by the client"));
  };
  call.on("cancelled", onCancel);
  const signal = (): AbortSignal => {
    if (ctl !== undefined) return ctl.signal;
    ctl = new AbortController();
    if (ended === undefined && deadlineAtMs !== undefined) {
      // grpc-js also emits "cancelled" on deadline; this timer makes it explicit and typed.
      const remainingMs = deadlineAtMs - Date.now();
      if (remainingMs <= 0) end(new WardenError(Code.DeadlineExceeded, "call deadline exceeded"));
      else cancelTimer = deadlineTimer(remainingMs, () => { end(new WardenError(Code.DeadlineExceeded, "call deadline exceeded")); });
    }
    if (ended !== undefined) ctl.abort(ended);
    return ctl.signal;
  };
  let responseHeader: Metadata | undefined;
  let responseTrailer: Metadata | undefined;
  const ctx: HandlerContext & PeerCertificateSource = {
    get signal() {
      return signal();
    },
    metadata: call.metadata,
    peer: call.getPeer(),
    deadlineAtMs,
    // Made when first read, as the signal: most calls set no response metadata.
    get responseHeader() {
      return (responseHeader ??= new Metadata());
    },
    get responseTrailer() {
      return (responseTrailer ??= new Metadata());
    },
    // Read only when a handler asks (peerIdentity): most calls never do.
    [peerCertificateOf]: () => call.getAuthContext()?.sslPeerCertificate,
  };
  return {
    ctx,
    header: () => responseHeader,
    trailer: () => responseTrailer,
    finish(reason = callCompleted) {
      live?.delete(handle);
      cancelTimer?.();
      call.removeListener("cancelled", onCancel);
      end(reason);
    },
  };
}

function hasEntries(md: Metadata | undefined): md is Metadata {
  return md !== undefined && Object.keys(md.getMap()).length > 0;
}

async function writeAll(call: ServerWritableStream<unknown, unknown> | ServerDuplexStream<unknown, unknown>, source: AsyncIterable<unknown>, s: CallScope): Promise<void> {
  const ctx = s.ctx;
  let headerSent = false;
  for await (const msg of source) {
    if (ctx.signal.aborted) break;
    if (!headerSent) {
      headerSent = true;
      const header = s.header();
      if (hasEntries(header)) call.sendMetadata(header);
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
  const header = s.header();
  if (!headerSent && hasEntries(header)) call.sendMetadata(header);
}

/**
 * The request side of a streaming call. The default Readable iterator destroys
 * the stream when the requests end, which would drop the response status; this
 * one leaves the call open so the handler can still answer and end it. A
 * request that did not decode is reported to `undecodable` (which answers the
 * call INVALID_ARGUMENT) and thrown to the handler.
 */
function requestsOf(call: ServerDuplexStream<unknown, unknown> | ServerReadableStream<unknown, unknown>, undecodable: (err: WardenError) => void): AsyncIterable<unknown> {
  return {
    [Symbol.asyncIterator]: () => {
      const it = call.iterator({ destroyOnReturn: false });
      return {
        async next(): Promise<IteratorResult<unknown>> {
          const r = await it.next();
          if (r.done !== true && r.value instanceof UndecodableRequest) {
            undecodable(r.value.error);
            throw r.value.error;
          }
          return r;
        },
        async return(): Promise<IteratorResult<unknown>> {
          return (await it.return?.()) ?? { done: true, value: undefined };
        },
      };
    },
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
export function wrapHandler(method: DescMethod, handler: AnyHandler, live?: Set<LiveCall>): UntypedHandleCall {
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
            const header = s.header();
            if (hasEntries(header)) call.sendMetadata(header);
            callback(null, res, s.trailer());
            s.finish();
          },
          (err: unknown) => {
            callback(toGrpcStatus(err, s.trailer()));
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
        writeAll(call, handler(call.request, s.ctx) as AsyncIterable<unknown>, s).then(
          () => {
            call.end(s.trailer());
            s.finish();
          },
          (err: unknown) => {
            call.emit("error", toGrpcStatus(err, s.trailer()));
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
          call.emit("error", toGrpcStatus(err, s.trailer()));
          s.finish(undecodable);
        };
        writeAll(call, handler(requestsOf(call, (e) => { fail(e, e); }), s.ctx) as AsyncIterable<unknown>, s).then(() => {
          if (answered) return;
          answered = true;
          call.end(s.trailer());
          s.finish();
        }, fail);
      };
    case "client_streaming":
      return (call: ServerReadableStream<unknown, unknown>, callback: sendUnaryData<unknown>) => {
        const s = scope(call, live);
        let answered = false;
        // The handler failed, or (with the error as the signal's reason) a request did not decode.
        const fail = (err: unknown, undecodable?: WardenError): void => {
          if (answered) return;
          answered = true;
          callback(toGrpcStatus(err, s.trailer()));
          s.finish(undecodable);
        };
        (handler(requestsOf(call, (e) => { fail(e, e); }), s.ctx) as Promise<unknown>).then((res) => {
          if (answered) return;
          answered = true;
          callback(null, res, s.trailer());
          s.finish();
        }, fail);
      };
  }
}
