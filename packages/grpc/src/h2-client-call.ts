import type { ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http2";
// grpc-js's Metadata class from its own module, not the package index: the index loads the
// whole grpc-js channel stack (and proto-loader, protobufjs), which the lean client exists to avoid
// and which a short `warden` admin command cannot afford to load (see services/cli).
import { Metadata } from "@grpc/grpc-js/build/src/metadata.js";
import { Code, WardenError, abortReason, deadlineTimer, isCode, type AbortLike, type Cancel } from "@warden/common";
import { detailsTrailerKey, parseErrorDetails } from "./codes.js";
import { h2c, type H2Connection, type SessionSlot } from "./h2-connection.js";
import { MessageReader, decodeGrpcMessage, formatGrpcTimeout, frameMessage } from "./h2-wire.js";
import type { CallOptions } from "./types.js";
import { notConnectedTransport } from "./call-never-sent.js";
import { callDeadlineOf, unresponsiveError, watchPeer, whenPeerAnswers } from "./peer-liveness.js";

/** Status codes for an HTTP response that carries no grpc-status (the gRPC HTTP/2 spec's table). */
function codeForHttpStatus(status: number): Code {
  switch (status) {
    case 400:
      return Code.Internal;
    case 401:
      return Code.Unauthenticated;
    case 403:
      return Code.PermissionDenied;
    case 404:
      return Code.Unimplemented;
    case 429:
    case 502:
    case 503:
    case 504:
      return Code.Unavailable;
    default:
      return Code.Unknown;
  }
}

function statusError(headers: IncomingHttpHeaders): WardenError | undefined {
  const raw = Number(headers["grpc-status"]);
  if (raw === 0) return undefined;
  const code = isCode(raw) ? raw : Code.Unknown;
  return new WardenError(code, decodeGrpcMessage(headers["grpc-message"]), { details: parseErrorDetails(headers[detailsTrailerKey]) });
}

/** A lean client call's options: a call may be cancelled by `cancel` (the lean server's per-call CallSignal) instead of an AbortSignal; it wins over `signal`. */
export interface H2CallOptions extends CallOptions {
  readonly cancel?: AbortLike;
  /**
   * `cancel` itself aborts at `deadlineAtMs` (a proxy passing its own call's
   * cancellation and deadline on: HandlerContext's fires at its deadline). The
   * deadline still goes to the server (grpc-timeout), but no second timer is
   * armed for it. Ignored without `cancel` or with `timeoutMs`.
   */
  readonly cancelAtDeadline?: boolean;
}

/** Stream errors are reported through 'close'; one listener for every call. */
const ignore = (): undefined => undefined;

export interface CallControl {
  cancel(): void;
  pause(): void;
  resume(): void;
}

export interface CallSink {
  message(bytes: Uint8Array): void;
  /** Called once, after the last message: undefined for OK. */
  done(err: WardenError | undefined): void;
}

/**
 * One call: sends the framed request, parses length-prefixed replies as they
 * arrive (a reply may span data chunks) and settles once, on the stream's
 * close, from the trailers — or from how the stream ended when no status
 * came: a dropped connection is UNAVAILABLE (the backend is gone).
 *
 * A class with prototype methods and anonymous listener arrows rather than a
 * function of named closures: this runs per routed call, and under tsx every
 * named closure costs a `name` definition per call (measured ~0.2 µs each).
 */
class ClientCall implements CallControl {
  private settled = false;
  private cancelTimer: Cancel | undefined;
  private onAbort: (() => void) | undefined;
  /** What cancels the call: `opts.cancel`, else `opts.signal`. */
  private readonly signal: AbortLike | undefined;
  private stream: ClientHttp2Stream | undefined;
  private slot: SessionSlot | undefined;
  /** Why the stream ended early on our side, when it did. */
  private ownEnd: WardenError | undefined;
  /** null: no grpc-status seen yet. */
  private status: WardenError | undefined | null = null;
  private httpStatus = 0;
  private contentType = "";
  private reader: MessageReader | undefined;
  /** Stops the liveness watch over the whole call (opts.answerWithinMs). */
  private stopWatch: (() => void) | undefined;

  constructor(
    private readonly authority: string,
    private readonly opts: H2CallOptions | undefined,
    private readonly sink: CallSink,
  ) {
    this.signal = opts?.cancel ?? opts?.signal;
  }

  start(conn: H2Connection, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, maxReceive: number, maxSend: number): void {
    const withinMs = this.opts?.answerWithinMs;
    if (withinMs === undefined) {
      this.send(conn, path, request, maxReceive, maxSend);
      return;
    }
    // Nothing is sent until the server is known to answer: a call failed here ran nowhere.
    whenPeerAnswers(conn, this.authority, this.opts, withinMs, this.signal).then(
      () => {
        this.send(conn, path, request, maxReceive, maxSend);
      },
      (err: unknown) => {
        this.finish(WardenError.from(err, Code.Unavailable));
      },
    );
  }

  private stopLiveness(): void {
    this.stopWatch?.();
    this.stopWatch = undefined;
  }

  private send(conn: H2Connection, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, maxReceive: number, maxSend: number): void {
    const opts = this.opts;
    const signal = this.signal;
    if (signal?.aborted === true) {
      this.finish(abortReason(signal));
      return;
    }
    const deadlineAtMs = callDeadlineOf(opts);
    // A literal when the call has no metadata (the proxy hop's usual case): no spread per call.
    const headers: OutgoingHttpHeaders =
      opts?.metadata === undefined
        ? { [h2c.HTTP2_HEADER_METHOD]: "POST", [h2c.HTTP2_HEADER_PATH]: path, [h2c.HTTP2_HEADER_AUTHORITY]: this.authority, [h2c.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", [h2c.HTTP2_HEADER_TE]: "trailers" }
        : {
            ...opts.metadata.toHttp2Headers(),
            [h2c.HTTP2_HEADER_METHOD]: "POST",
            [h2c.HTTP2_HEADER_PATH]: path,
            [h2c.HTTP2_HEADER_AUTHORITY]: this.authority,
            [h2c.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc",
            [h2c.HTTP2_HEADER_TE]: "trailers",
          };
    let remaining = 0;
    if (deadlineAtMs !== undefined) {
      remaining = deadlineAtMs - Date.now();
      if (remaining <= 0) {
        this.finish(new WardenError(Code.DeadlineExceeded, "deadline exceeded before the call started"));
        return;
      }
      headers["grpc-timeout"] = formatGrpcTimeout(remaining);
    }
    let stream: ClientHttp2Stream;
    let slot: SessionSlot;
    let body: Buffer | undefined;
    try {
      body = request instanceof Uint8Array ? frameMessage(request, maxSend, "request") : undefined;
      const opened = conn.open(headers);
      stream = opened.stream;
      slot = opened.slot;
      this.slot = slot;
    } catch (err) {
      this.finish(WardenError.from(err, Code.Unavailable));
      return;
    }
    this.stream = stream;
    this.reader = new MessageReader(maxReceive, "reply");
    if (signal !== undefined) {
      this.onAbort = () => {
        this.cancelWith(abortReason(signal));
      };
      signal.addEventListener("abort", this.onAbort, { once: true });
    }
    // One timer per deadline: none when the cancel already fires at it.
    if (deadlineAtMs !== undefined && !(opts?.cancelAtDeadline === true && opts.cancel !== undefined && opts.timeoutMs === undefined)) {
      this.cancelTimer = deadlineTimer(remaining, () => {
        this.cancelWith(new WardenError(Code.DeadlineExceeded, `deadline exceeded after ${String(Math.round(remaining))} ms`));
      });
    }
    stream.on("response", (h: IncomingHttpHeaders) => {
      this.onResponse(h);
    });
    stream.on("trailers", (h: IncomingHttpHeaders) => {
      this.status = statusError(h);
      if (this.opts?.onTrailer !== undefined) this.opts.onTrailer(Metadata.fromHttp2Headers(h));
    });
    stream.on("data", (chunk: Buffer) => {
      this.onData(chunk);
    });
    // The server finished (its status came) while requests may still be written (a client or bidi
    // stream): the call is over, so our side ends too; otherwise 'close' waits for the caller's last request.
    // (A single request is ended below, before any reply: nothing to do then.)
    if (body === undefined) {
      stream.on("end", () => {
        if (!stream.closed && !stream.writableEnded) stream.close(h2c.NGHTTP2_NO_ERROR);
      });
    }
    // Reported through 'close', which always follows.
    stream.on("error", ignore);
    stream.on("close", () => {
      this.slot?.release();
      this.finish(this.outcome());
    });
    if (body !== undefined) stream.end(body);
    else void this.pump(stream, request as AsyncIterable<Uint8Array>, maxSend);
    const withinMs = opts?.answerWithinMs;
    if (withinMs !== undefined) {
      this.stopWatch = watchPeer(
        () => slot,
        withinMs,
        () => {
          this.stopWatch = undefined;
          this.cancelWith(unresponsiveError(this.authority, withinMs, this.httpStatus !== 0));
          conn.retire(slot);
        },
      );
    }
  }

  /** Writes a streaming call's requests as they come, with backpressure; a failing source cancels the call. */
  private async pump(stream: ClientHttp2Stream, requests: AsyncIterable<Uint8Array>, maxSend: number): Promise<void> {
    try {
      for await (const r of requests) {
        if (this.settled || this.ownEnd !== undefined || stream.closed) return;
        if (!stream.write(frameMessage(r, maxSend, "request"))) await writable(stream);
      }
      if (!stream.closed && !stream.writableEnded) stream.end();
    } catch (err) {
      this.cancelWith(WardenError.from(err, Code.Canceled));
    }
  }

  cancel(): void {
    this.cancelWith(new WardenError(Code.Canceled, "the caller stopped reading"));
  }

  pause(): void {
    this.stream?.pause();
  }

  resume(): void {
    this.stream?.resume();
  }

  private cancelWith(why: WardenError): void {
    this.ownEnd ??= why;
    const stream = this.stream;
    if (stream !== undefined && !stream.closed) stream.close(h2c.NGHTTP2_CANCEL);
  }

  private onResponse(h: IncomingHttpHeaders): void {
    this.slot?.heard();
    this.httpStatus = Number(h[h2c.HTTP2_HEADER_STATUS]);
    this.contentType = h[h2c.HTTP2_HEADER_CONTENT_TYPE] ?? "";
    if (h["grpc-status"] !== undefined) this.status = statusError(h); // trailers-only response
    if (this.opts?.onHeader !== undefined) this.opts.onHeader(Metadata.fromHttp2Headers(h));
  }

  private onData(chunk: Buffer): void {
    if (this.ownEnd !== undefined || this.reader === undefined) return;
    const sink = this.sink;
    const err = this.reader.push(chunk, (bytes) => {
      sink.message(bytes);
    });
    if (err !== undefined) this.cancelWith(err);
  }

  private finish(err: WardenError | undefined): void {
    if (this.settled) return;
    this.settled = true;
    this.stopLiveness();
    this.cancelTimer?.();
    if (this.onAbort !== undefined) this.signal?.removeEventListener("abort", this.onAbort);
    this.sink.done(err);
  }

  /** How the call ended: undefined is OK. */
  private outcome(): WardenError | undefined {
    if (this.ownEnd !== undefined) return this.ownEnd;
    if (this.status !== null) return this.status;
    const httpStatus = this.httpStatus;
    if (httpStatus !== 0 && httpStatus !== 200) return new WardenError(codeForHttpStatus(httpStatus), `HTTP status ${String(httpStatus)} without a gRPC status`);
    if (httpStatus === 200 && !this.contentType.startsWith("application/grpc")) return new WardenError(Code.Unknown, `unexpected content type "${this.contentType}"`);
    const slot = this.slot;
    const rstCode = this.stream?.rstCode ?? h2c.NGHTTP2_NO_ERROR;
    const connectionGone = slot === undefined || slot.gone || slot.session.destroyed;
    switch (rstCode) {
      case h2c.NGHTTP2_REFUSED_STREAM:
        return new WardenError(Code.Unavailable, "the server refused the stream");
      case h2c.NGHTTP2_ENHANCE_YOUR_CALM:
        return new WardenError(Code.ResourceExhausted, "the server says enhance your calm");
      case h2c.NGHTTP2_CANCEL:
        if (!connectionGone) return new WardenError(Code.Canceled, "the server cancelled the call");
        break;
      default:
        if (!connectionGone && rstCode !== h2c.NGHTTP2_NO_ERROR) return new WardenError(Code.Internal, `stream reset with HTTP/2 code ${String(rstCode)}`);
    }
    // The session never got ready: the request never reached a server (callNeverSent).
    if (slot !== undefined && slot.session.connecting) return new WardenError(Code.Unavailable, `cannot connect to ${this.authority}`, { details: { transport: notConnectedTransport } });
    // No status and the connection went away: the server is gone.
    return new WardenError(Code.Unavailable, `connection to ${this.authority} dropped before the call completed`);
  }
}

/** Resolves when the stream can take more writes, or closed. */
function writable(stream: ClientHttp2Stream): Promise<void> {
  return new Promise<void>((resolve) => {
    const go = (): void => {
      stream.removeListener("drain", go);
      stream.removeListener("close", go);
      resolve();
    };
    stream.once("drain", go);
    stream.once("close", go);
  });
}

/** Starts one call; the returned controls serve a consumer that stops early or reads slowly. */
export function startCall(conn: H2Connection, authority: string, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, opts: H2CallOptions | undefined, maxReceive: number, maxSend: number, sink: CallSink): CallControl {
  const call = new ClientCall(authority, opts, sink);
  call.start(conn, path, request, maxReceive, maxSend);
  return call;
}
