import type * as Http2 from "node:http2";
import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http2";
import { connect as netConnect, isIP } from "node:net";
import type * as Tls from "node:tls";
// grpc-js's Metadata class from its own module, not the package index: the index loads the
// whole grpc-js channel stack (and proto-loader, protobufjs), which this client exists to avoid
// and which a short `warden` admin command cannot afford to load (see services/cli).
import { Metadata } from "@grpc/grpc-js/build/src/metadata.js";
import { create, fromBinary, toBinary, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, WardenError, abortReason, deadlineTimer, isCode, type Cancel } from "@warden/common";
import { detailsTrailerKey, parseErrorDetails } from "./codes.js";
import { MessageReader, decodeGrpcMessage, formatGrpcTimeout, frameMessage } from "./h2-wire.js";
import { defaultMaxMessageBytes } from "./limits.js";
import { methodPath } from "./service-definition.js";
import type { CallOptions, Client } from "./types.js";
import type { ClientTls } from "./tls-material.js";

let http2: typeof Http2 | undefined;

/**
 * node:http2 on first use, not at import: loading it (with http, tls and
 * crypto) is tens of milliseconds, which `warden --help` and every short
 * command that makes no call would otherwise pay.
 */
function loadHttp2(): typeof Http2 {
  return (http2 ??= process.getBuiltinModule("node:http2"));
}

/**
 * The node:http2 constants a call uses (header names; RFC 9113 §7 error
 * codes), so building one needs no node:http2 before it connects.
 * h2-client.test.ts checks them against node:http2's.
 */
export const h2c = {
  HTTP2_HEADER_METHOD: ":method",
  HTTP2_HEADER_PATH: ":path",
  HTTP2_HEADER_AUTHORITY: ":authority",
  HTTP2_HEADER_STATUS: ":status",
  HTTP2_HEADER_CONTENT_TYPE: "content-type",
  HTTP2_HEADER_TE: "te",
  NGHTTP2_NO_ERROR: 0,
  NGHTTP2_REFUSED_STREAM: 7,
  NGHTTP2_CANCEL: 8,
  NGHTTP2_ENHANCE_YOUR_CALM: 11,
} as const;

export interface H2ClientOptions {
  /** @default 50 MiB */
  maxReceiveMessageBytes?: number;
  /** @default 50 MiB */
  maxSendMessageBytes?: number;
  /** Connect over TLS, verifying the server against `ca` (system roots without), presenting `cert`/`key` for mutual TLS. @default plaintext */
  tls?: ClientTls;
  /** Metadata sent with every call (e.g. `bearerMetadata(token)`); a call's own metadata wins. */
  headers?: Readonly<Record<string, string>>;
}

/** A session and the calls running on it: the socket keeps the process alive only while calls run. */
class SessionSlot {
  active = 0;
  /** Set once the connection failed, closed or was told to go away: its streams end UNAVAILABLE. */
  gone = false;

  constructor(readonly session: ClientHttp2Session) {}

  /** A call on this session ended: the socket stops holding the process open once none runs. */
  release(): void {
    if (--this.active === 0 && !this.session.destroyed) this.session.unref();
  }
}

/**
 * One HTTP/2 connection to a gRPC server (plaintext or TLS), opened on first use and
 * again after it closes. No name resolution, load balancing, retry or
 * interceptor layers: the coordinator→backend hop is a single known address
 * and the loader owns retries, so grpc-js's channel stack is pure cost there.
 */
class Connection {
  private slot: SessionSlot | undefined;
  private closed = false;

  private readonly host: string;
  private readonly port: number;

  constructor(
    private readonly authority: string,
    private readonly tls: ClientTls | undefined,
    private readonly extraHeaders?: Readonly<Record<string, string>>,
  ) {
    const colon = authority.lastIndexOf(":");
    this.host = authority.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
    this.port = Number(authority.slice(colon + 1));
  }

  open(headers: OutgoingHttpHeaders): { stream: ClientHttp2Stream; slot: SessionSlot } {
    if (this.closed) throw new WardenError(Code.Unavailable, `client for ${this.authority} is closed`);
    for (let attempt = 0; ; attempt++) {
      const slot = this.current();
      try {
        const stream = slot.session.request(this.extraHeaders === undefined ? headers : { ...this.extraHeaders, ...headers }, { endStream: false });
        if (slot.active++ === 0) slot.session.ref();
        return { stream, slot };
      } catch (err) {
        // request() throws once the session is closing (GOAWAY raced us): one fresh session.
        slot.gone = true;
        if (this.slot === slot) this.slot = undefined;
        if (attempt > 0) throw new WardenError(Code.Unavailable, `cannot reach ${this.authority}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
    }
  }

  private current(): SessionSlot {
    const s = this.slot;
    if (s !== undefined && !s.gone) return s;
    // Nagle off: calls are small writes, and holding one back for the previous
    // segment's ACK stalls a pipeline of many calls (grpc-js does the same).
    const tls = this.tls;
    const session =
      tls === undefined
        ? loadHttp2().connect(`http://${this.authority}`, { createConnection: () => netConnect({ host: this.host, port: this.port, noDelay: true }) })
        : loadHttp2().connect(`https://${this.authority}`, { createConnection: () => this.tlsConnect(tls) });
    const slot = new SessionSlot(session);
    const retire = (): void => {
      slot.gone = true;
      if (this.slot === slot) this.slot = undefined;
    };
    // Session errors also reach every open stream, which reports them; this
    // listener only keeps an unhandled 'error' from crashing the process.
    session.on("error", retire);
    session.on("goaway", retire);
    session.on("close", retire);
    session.unref();
    this.slot = slot;
    return slot;
  }

  /** A TLS socket offering h2; the certificate must name `serverName`, or else the host dialled (an IP SAN for an IP). */
  private tlsConnect(tls: ClientTls): Tls.TLSSocket {
    const name = tls.serverName ?? this.host;
    const socket = process.getBuiltinModule("node:tls").connect({
      host: this.host,
      port: this.port,
      ALPNProtocols: ["h2"],
      minVersion: "TLSv1.2",
      // SNI carries names only; an IP is checked against the certificate's IP SANs without it.
      ...(isIP(name) === 0 ? { servername: name } : {}),
      ...(tls.serverName === undefined ? {} : { checkServerIdentity: (_h: string, cert: Tls.PeerCertificate) => process.getBuiltinModule("node:tls").checkServerIdentity(name, cert) }),
      ...(tls.ca === undefined ? {} : { ca: tls.ca }),
      ...(tls.cert === undefined ? {} : { cert: tls.cert }),
      ...(tls.key === undefined ? {} : { key: tls.key }),
    });
    socket.setNoDelay(true);
    return socket;
  }

  close(): void {
    this.closed = true;
    this.slot?.session.destroy();
    this.slot = undefined;
  }
}

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

interface CallControl {
  cancel(): void;
  pause(): void;
  resume(): void;
}

interface CallSink {
  message(bytes: Uint8Array): void;
  /** Called once, after the last message: undefined for OK. */
  done(err: WardenError | undefined): void;
}

function deadlineOf(opts: CallOptions | undefined): number | undefined {
  if (opts === undefined) return undefined;
  const t = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
  const d = opts.deadlineAtMs;
  if (t === undefined) return d;
  return d === undefined ? t : Math.min(t, d);
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
  private stream: ClientHttp2Stream | undefined;
  private slot: SessionSlot | undefined;
  /** Why the stream ended early on our side, when it did. */
  private ownEnd: WardenError | undefined;
  /** null: no grpc-status seen yet. */
  private status: WardenError | undefined | null = null;
  private httpStatus = 0;
  private contentType = "";
  private reader: MessageReader | undefined;

  constructor(
    private readonly authority: string,
    private readonly opts: CallOptions | undefined,
    private readonly sink: CallSink,
  ) {}

  start(conn: Connection, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, maxReceive: number, maxSend: number): void {
    const opts = this.opts;
    const signal = opts?.signal;
    if (signal?.aborted === true) {
      this.finish(abortReason(signal));
      return;
    }
    const deadlineAtMs = deadlineOf(opts);
    const headers: OutgoingHttpHeaders = {
      ...(opts?.metadata === undefined ? {} : opts.metadata.toHttp2Headers()),
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
    let body: Buffer | undefined;
    try {
      body = request instanceof Uint8Array ? frameMessage(request, maxSend, "request") : undefined;
      const opened = conn.open(headers);
      stream = opened.stream;
      this.slot = opened.slot;
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
    if (deadlineAtMs !== undefined) {
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
    // Reported through 'close', which always follows.
    stream.on("error", () => undefined);
    stream.on("close", () => {
      this.slot?.release();
      this.finish(this.outcome());
    });
    if (body !== undefined) stream.end(body);
    else void this.pump(stream, request as AsyncIterable<Uint8Array>, maxSend);
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
    this.cancelTimer?.();
    if (this.onAbort !== undefined) this.opts?.signal?.removeEventListener("abort", this.onAbort);
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
function startCall(conn: Connection, authority: string, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, opts: CallOptions | undefined, maxReceive: number, maxSend: number, sink: CallSink): CallControl {
  const call = new ClientCall(authority, opts, sink);
  call.start(conn, path, request, maxReceive, maxSend);
  return call;
}

/** One unary call on encoded bytes: resolves with the reply's bytes. */
function unaryBytes(conn: Connection, authority: string, path: string, request: Uint8Array, opts: CallOptions | undefined, maxReceive: number, maxSend: number): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    let reply: Uint8Array | undefined;
    let extra = false;
    startCall(conn, authority, path, request, opts, maxReceive, maxSend, {
      message(bytes) {
        if (reply !== undefined) extra = true;
        reply = bytes;
      },
      done(err) {
        if (err !== undefined) reject(err);
        else if (reply === undefined || extra) reject(new WardenError(Code.Unimplemented, extra ? "received more than one reply for a unary call" : "received no reply for a unary call"));
        else resolve(reply);
      },
    });
  });
}

function unaryMethod(conn: Connection, authority: string, m: DescMethod, maxReceive: number, maxSend: number) {
  const path = methodPath(m);
  return async (request: unknown, opts?: CallOptions): Promise<unknown> => {
    const reply = await unaryBytes(conn, authority, path, toBinary(m.input, create(m.input, request as never)), opts, maxReceive, maxSend);
    try {
      return fromBinary(m.output, reply);
    } catch (e) {
      throw new WardenError(Code.Internal, `cannot decode the reply: ${e instanceof Error ? e.message : String(e)}`);
    }
  };
}

/** Replies buffered ahead of a slow consumer before the stream is paused (HTTP/2 flow control then holds the server). */
const streamHighWater = 64;

/** A small queue between the stream's events and the consumer's `next()`; `decode` turns a reply's bytes into what is yielded. */
function replyStream(conn: Connection, authority: string, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, opts: CallOptions | undefined, maxReceive: number, maxSend: number, decode: (bytes: Uint8Array) => unknown): AsyncIterable<unknown> {
  return {
    [Symbol.asyncIterator]() {
      const queue: unknown[] = [];
      let ended = false;
      let failure: WardenError | undefined;
      let wake: (() => void) | undefined;
      const notify = (): void => {
        const w = wake;
        wake = undefined;
        w?.();
      };
      const call = startCall(conn, authority, path, request, opts, maxReceive, maxSend, {
        message(bytes) {
          try {
            queue.push(decode(bytes));
          } catch (e) {
            failure ??= new WardenError(Code.Internal, `cannot decode a reply: ${e instanceof Error ? e.message : String(e)}`);
            call.cancel();
          }
          if (queue.length === streamHighWater) call.pause();
          notify();
        },
        done(err) {
          ended = true;
          failure ??= err;
          notify();
        },
      });
      return {
        async next(): Promise<IteratorResult<unknown>> {
          for (;;) {
            if (queue.length > 0) {
              if (queue.length === streamHighWater) call.resume();
              return { value: queue.shift(), done: false };
            }
            if (failure !== undefined) throw failure;
            if (ended) return { value: undefined, done: true };
            await new Promise<void>((r) => (wake = r));
          }
        },
        // Leaving the loop early (break/return) cancels the RPC instead of leaking it.
        return(): Promise<IteratorResult<unknown>> {
          if (!ended) call.cancel();
          ended = true;
          queue.length = 0;
          return Promise.resolve({ value: undefined, done: true });
        },
      };
    },
  };
}

const asBytes = (bytes: Uint8Array): Uint8Array => bytes;

function serverStreamMethod(conn: Connection, authority: string, m: DescMethod, maxReceive: number, maxSend: number) {
  const path = methodPath(m);
  const decode = (bytes: Uint8Array): unknown => fromBinary(m.output, bytes);
  return (request: unknown, opts?: CallOptions): AsyncIterable<unknown> => replyStream(conn, authority, path, toBinary(m.input, create(m.input, request as never)), opts, maxReceive, maxSend, decode);
}

/**
 * A lean gRPC client over node:http2 for services whose methods are unary or
 * server-streaming, with the same `Client<T>` surface and error mapping as
 * `createClient`: deadlines (sent as grpc-timeout and enforced locally),
 * AbortSignal cancel (RST_STREAM CANCEL), metadata both ways, WardenError
 * details from trailers, message size limits, and UNAVAILABLE when the
 * connection drops. Plaintext, or TLS with `options.tls`; meant for the
 * coordinator's hot proxy hop to backends and the CLI's admin calls.
 */
export function createH2Client<T extends DescService>(svc: T, address: string, options: H2ClientOptions = {}): H2Client<T> {
  const conn = new Connection(address, options.tls, options.headers);
  const maxReceive = options.maxReceiveMessageBytes ?? defaultMaxMessageBytes;
  const maxSend = options.maxSendMessageBytes ?? defaultMaxMessageBytes;
  const out: Record<string, unknown> = {
    close() {
      conn.close();
    },
    unaryBytes(method: DescMethod, request: Uint8Array, opts?: CallOptions): Promise<Uint8Array> {
      return unaryBytes(conn, address, methodPath(method), request, opts, maxReceive, maxSend);
    },
    streamBytes(method: DescMethod, requests: Uint8Array | AsyncIterable<Uint8Array>, opts?: CallOptions): AsyncIterable<Uint8Array> {
      return replyStream(conn, address, methodPath(method), requests, opts, maxReceive, maxSend, asBytes) as AsyncIterable<Uint8Array>;
    },
  };
  for (const m of svc.methods) {
    if (m.methodKind === "unary") out[m.localName] = unaryMethod(conn, address, m, maxReceive, maxSend);
    else if (m.methodKind === "server_streaming") out[m.localName] = serverStreamMethod(conn, address, m, maxReceive, maxSend);
    else {
      // Streaming requests go raw through `streamBytes`; a typed call says so rather than failing construction.
      const why = `createH2Client's typed methods are unary and server-streaming; ${m.parent.typeName}.${m.name} is ${m.methodKind}`;
      out[m.localName] = () => {
        throw new WardenError(Code.Unimplemented, why);
      };
    }
  }
  return out as H2Client<T>;
}

/** The lean client: the typed methods, plus a unary call on already-encoded bytes (a proxy's pass-through). */
export type H2Client<T extends DescService> = Client<T> & {
  unaryBytes(method: DescMethod, request: Uint8Array, opts?: CallOptions): Promise<Uint8Array>;
  /**
   * A streaming call on encoded bytes, any kind but unary: one request (server
   * streaming) or requests as they come (client and bidi streaming, written
   * with backpressure), the replies' bytes as they arrive.
   */
  streamBytes(method: DescMethod, requests: Uint8Array | AsyncIterable<Uint8Array>, opts?: CallOptions): AsyncIterable<Uint8Array>;
};
