import { constants as h2, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from "node:http2";
import { create, toBinary, type DescMethod } from "@bufbuild/protobuf";
import { CallSignal, Code, WardenError, deadlineTimer, type AbortLike, type Cancel } from "@warden/common";
import { detailsTrailerKey, wireStatus } from "./codes.js";
import { MessageReader, encodeGrpcMessage, frameMessage, parseGrpcTimeout } from "./h2-wire.js";
import { LeanContext } from "./lean-context.js";
import { decodeRequest } from "./request-decode.js";
import { RequestQueue } from "./request-queue.js";
import type { HandlerContext } from "./types.js";

export type AnyHandler = (request: unknown, ctx: HandlerContext) => unknown;

export interface Route {
  readonly method: DescMethod;
  readonly handler: AnyHandler;
  /** True for a raw handler: no decoding or encoding here. */
  readonly raw: boolean;
  /** A raw client- or bidi-streaming handler: it gets the requests as they arrive. */
  readonly streamIn: boolean;
}

/**
 * What every OK reply sends, shared by all calls: node copies headers and
 * options before using them (respond, sendTrailers), so none is built per call.
 */
const okHeaders: OutgoingHttpHeaders = { [h2.HTTP2_HEADER_STATUS]: 200, [h2.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc" };
const okTrailers: OutgoingHttpHeaders = { "grpc-status": "0" };
/**
 * No `date` header (node adds one to every respond unless told not to): gRPC
 * does not use it, and it is one more header per reply to validate and
 * HPACK-encode (a new table entry every second).
 */
const withTrailers = { waitForTrailers: true, sendDate: false } as const;
const endsStream = { endStream: true, sendDate: false } as const;
/** Stream errors are reported through 'close'; one listener for every call. */
const ignore = (): undefined => undefined;

/** The abort reason of a call that completed; shared so no stack trace is captured per call. */
const callCompleted = new WardenError(Code.Canceled, "call completed");

/** The status trailers for an error (what it shows is decided by `wireStatus`, as for GrpcServer). */
export function errorTrailers(err: unknown, ctx: LeanContext | undefined): OutgoingHttpHeaders {
  const w = wireStatus(err);
  const out: OutgoingHttpHeaders = { ...ctx?.trailerFields(), "grpc-status": String(w.code), "grpc-message": encodeGrpcMessage(w.message) };
  if (w.detailsJson !== undefined) out[detailsTrailerKey] = w.detailsJson;
  return out;
}

/** Answers with the status alone (no reply): the headers carry it and end the stream. */
export function trailersOnly(stream: ServerHttp2Stream, t: OutgoingHttpHeaders): void {
  if (stream.closed || stream.headersSent) return;
  stream.respond({ [h2.HTTP2_HEADER_STATUS]: 200, [h2.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", ...t }, endsStream);
}

/**
 * One call on the lean server, from its request bytes to its trailers. A
 * class with prototype methods and anonymous listener arrows rather than a
 * function of named closures: this runs per routed call, and under tsx every
 * named closure costs a `name` definition per call.
 */
export class LeanServerCall {
  /** The call's cancellation: no AbortSignal unless the handler asks for one (LeanContext.signal). */
  private readonly cancel = new CallSignal();
  private readonly ctx: LeanContext;
  private cancelTimer: Cancel | undefined;
  private done = false;
  private readonly reader: MessageReader;
  private request: Buffer | undefined;
  private extra = false;
  /** The requests of a streaming-request route, as they arrive. */
  private requests: RequestQueue | undefined;

  constructor(
    private readonly stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    private readonly route: Route,
    private readonly live: Set<CallSignal>,
    maxReceive: number,
    private readonly maxSend: number,
  ) {
    const timeoutMs = parseGrpcTimeout(headers["grpc-timeout"]);
    this.ctx = new LeanContext(this.cancel, headers, stream.session as ServerHttp2Session, timeoutMs === undefined ? undefined : Date.now() + timeoutMs);
    this.reader = new MessageReader(maxReceive, "request");
  }

  start(): void {
    const stream = this.stream;
    this.live.add(this.cancel);
    const deadlineAtMs = this.ctx.deadlineAtMs;
    if (deadlineAtMs !== undefined) {
      this.cancelTimer = deadlineTimer(deadlineAtMs - Date.now(), () => {
        const e = new WardenError(Code.DeadlineExceeded, "call deadline exceeded");
        this.cancel.abort(e);
        this.fail(e);
      });
    }
    // A client cancel or a dropped connection closes the stream before we finished.
    stream.on("close", () => {
      this.onClose();
    });
    stream.on("error", ignore);
    stream.on("data", (chunk: Buffer) => {
      this.onData(chunk);
    });
    stream.on("end", () => {
      this.onEnd();
    });
    if (this.route.streamIn) {
      // The handler runs from the first byte: requests reach it as they arrive, not at the half-close.
      this.requests = new RequestQueue(stream);
      void this.serverStream(this.requests);
    }
  }

  private onClose(): void {
    if (this.done) return;
    // A client enforcing the same deadline may reset the stream a hair before our timer fires.
    const expired = this.ctx.deadlineAtMs !== undefined && Date.now() >= this.ctx.deadlineAtMs - 5;
    this.cancel.abort(expired ? new WardenError(Code.DeadlineExceeded, "call deadline exceeded") : new WardenError(Code.Canceled, "call cancelled by the client"));
    this.finish();
  }

  private onData(chunk: Buffer): void {
    if (this.done) return;
    const requests = this.requests;
    const err = this.reader.push(chunk, (bytes) => {
      if (requests !== undefined) requests.push(bytes);
      else {
        if (this.request !== undefined) this.extra = true;
        this.request = bytes;
      }
    });
    if (err !== undefined) this.fail(err);
  }

  private onEnd(): void {
    if (this.done) return;
    if (this.requests !== undefined) {
      if (this.reader.partial) this.fail(new WardenError(Code.Internal, "the request stream ended inside a message"));
      else this.requests.end();
      return;
    }
    const request = this.request;
    if (request === undefined || this.extra || this.reader.partial) {
      this.fail(new WardenError(Code.Unimplemented, request === undefined ? "no request message" : "a unary request carries one message"));
      return;
    }
    let input: unknown;
    try {
      // A raw handler reads the bytes itself and answers undecodable ones INVALID_ARGUMENT too.
      input = this.route.raw ? request : decodeRequest(this.route.method.input, request);
    } catch (e) {
      this.fail(e);
      return;
    }
    if (this.route.method.methodKind === "unary") this.unary(input);
    else void this.serverStream(input);
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.cancelTimer?.();
    this.live.delete(this.cancel);
    this.cancel.abort(callCompleted);
    this.requests?.fail(this.cancel.reason);
  }

  private fail(err: unknown): void {
    if (this.done) return;
    const stream = this.stream;
    if (!stream.closed) {
      if (!stream.headersSent) trailersOnly(stream, errorTrailers(err, this.ctx));
      else if (!stream.writableEnded) {
        // Replies went out already: the status goes in the trailers. (Once the
        // reply has ended, its own OK trailers are on their way: too late to fail.)
        stream.once("wantTrailers", () => {
          stream.sendTrailers(errorTrailers(err, this.ctx));
        });
        stream.end();
      }
    }
    this.finish();
  }

  private encode(value: unknown): Buffer {
    if (this.route.raw) return frameMessage(value as Uint8Array, this.maxSend, "reply");
    const schema = this.route.method.output;
    return frameMessage(toBinary(schema, create(schema, value as never)), this.maxSend, "reply");
  }

  private respondHeaders(): void {
    if (this.stream.headersSent) return;
    // Per call: no spread to merge when the handler set no response metadata (the usual case).
    const extra = this.ctx.headerFields();
    this.stream.respond(extra === undefined ? okHeaders : { ...okHeaders, ...extra }, withTrailers);
  }

  /** Ends the reply; the OK trailers follow when HTTP/2 asks for them. */
  private endOk(body?: Buffer): void {
    const stream = this.stream;
    stream.once("wantTrailers", () => {
      const extra = this.ctx.trailerFields();
      stream.sendTrailers(extra === undefined ? okTrailers : { ...extra, "grpc-status": "0" });
      this.finish();
    });
    if (body === undefined) stream.end();
    else stream.end(body);
  }

  private unary(input: unknown): void {
    let result: Promise<unknown>;
    try {
      result = this.route.handler(input, this.ctx) as Promise<unknown>;
    } catch (err) {
      this.fail(err);
      return;
    }
    result.then(
      (value) => {
        this.reply(value);
      },
      (err: unknown) => {
        this.fail(err);
      },
    );
  }

  private reply(value: unknown): void {
    if (this.stream.closed) {
      this.finish();
      return;
    }
    let body: Buffer;
    try {
      body = this.encode(value);
    } catch (err) {
      this.fail(err);
      return;
    }
    this.respondHeaders();
    this.endOk(body);
  }

  private async serverStream(input: unknown): Promise<void> {
    const stream = this.stream;
    const ctx = this.ctx;
    try {
      for await (const msg of this.route.handler(input, ctx) as AsyncIterable<unknown>) {
        if (this.cancel.aborted || stream.closed) break;
        this.respondHeaders();
        if (!stream.write(this.encode(msg))) await drained(stream, this.cancel);
      }
    } catch (err) {
      this.fail(err);
      return;
    }
    if (stream.closed || this.cancel.aborted) {
      this.finish();
      return;
    }
    this.respondHeaders();
    this.endOk();
  }
}

/** Resolves when the stream can take more, or the call's signal fires. */
function drained(stream: ServerHttp2Stream, signal: AbortLike): Promise<void> {
  return new Promise<void>((resolve) => {
    const go = (): void => {
      stream.removeListener("drain", go);
      signal.removeEventListener("abort", go);
      resolve();
    };
    stream.once("drain", go);
    signal.addEventListener("abort", go, { once: true });
  });
}
