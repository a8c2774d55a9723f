import { createSecureServer, createServer, constants as h2, type Http2SecureServer, type Http2Server, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from "node:http2";
import { Metadata } from "@grpc/grpc-js";
import { create, toBinary, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, WardenError, deadlineTimer, type Cancel } from "@warden/common";
import { Health } from "@warden/proto";
import { detailsTrailerKey, wireStatus } from "./codes.js";
import { HealthStatus, ServingStatus } from "./health.js";
import { MessageReader, encodeGrpcMessage, frameMessage, parseGrpcTimeout } from "./h2-wire.js";
import { defaultMaxConcurrentStreams, defaultMaxMessageBytes, defaultMaxMetadataBytes, sessionMemoryMiB } from "./limits.js";
import { headerListBytes, metadataTooLarge } from "./metadata-limit.js";
import { decodeRequest } from "./request-decode.js";
import { RequestQueue } from "./request-queue.js";
import { methodPath } from "./service-definition.js";
import type { ListenResult, ShutdownOutcome } from "./server.js";
import type { HandlerContext, ServiceImpl } from "./types.js";
import type { PeerCertificate, TLSSocket } from "node:tls";
import { checkPlaintextListen } from "./listen-guard.js";
import { peerCertificateOf } from "./peer-identity.js";
import { secureContextOptions } from "./server-tls.js";
import type { TlsMaterial } from "./tls-material.js";

export interface LeanServerOptions {
  /** @default 50 MiB */
  maxReceiveMessageBytes?: number;
  /** @default 50 MiB */
  maxSendMessageBytes?: number;
  /** Request metadata (the whole header list) one call may carry; beyond it RESOURCE_EXHAUSTED. @default 16 KiB */
  maxMetadataBytes?: number;
  /** Concurrent calls one connection may run (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). @default 256 */
  maxConcurrentStreams?: number;
  /** Serve TLS with this certificate (mutual TLS when it has a CA); replace it with `updateTls`. @default plaintext */
  tls?: TlsMaterial;
  /** Allow plaintext on a non-loopback address (see checkPlaintextListen). @default false */
  insecure?: boolean;
}

type AnyHandler = (request: unknown, ctx: HandlerContext) => unknown;

/** A unary handler on encoded bytes: the request's bytes in, the reply's bytes out (a proxy's pass-through). */
export type RawUnaryHandler = (request: Uint8Array, ctx: HandlerContext) => Promise<Uint8Array>;

/** A server-streaming handler on encoded bytes. */
export type RawServerStreamHandler = (request: Uint8Array, ctx: HandlerContext) => AsyncIterable<Uint8Array>;

/**
 * A client- or bidi-streaming handler on encoded bytes: the requests as they
 * arrive in, the replies out (one, for client streaming).
 */
export type RawStreamHandler = (requests: AsyncIterable<Uint8Array>, ctx: HandlerContext) => AsyncIterable<Uint8Array>;

/** The raw handlers of a whole service, asked once per method by its kind. */
export interface RawServiceHandlers {
  unary(method: DescMethod): RawUnaryHandler;
  serverStream(method: DescMethod): RawServerStreamHandler;
  stream(method: DescMethod): RawStreamHandler;
}

interface Route {
  readonly method: DescMethod;
  readonly handler: AnyHandler;
  /** True for a raw handler: no decoding or encoding here. */
  readonly raw: boolean;
  /** A raw client- or bidi-streaming handler: it gets the requests as they arrive. */
  readonly streamIn: boolean;
}

/** The abort reason of a call that completed; shared so no stack trace is captured per call. */
const callCompleted = new WardenError(Code.Canceled, "call completed");

/** Metadata objects are built only when a handler asks for them: most calls never do. */
class LeanContext implements HandlerContext {
  readonly signal: AbortSignal;
  private md: Metadata | undefined;
  private header: Metadata | undefined;
  private trailer: Metadata | undefined;

  constructor(
    controller: AbortController,
    private readonly headers: IncomingHttpHeaders,
    private readonly session: ServerHttp2Session,
    readonly deadlineAtMs: number | undefined,
  ) {
    this.signal = controller.signal;
  }

  get metadata(): Metadata {
    this.md ??= Metadata.fromHttp2Headers(this.headers);
    return this.md;
  }

  get peer(): string {
    const s = this.session.socket;
    return `${s.remoteAddress ?? "unknown"}:${String(s.remotePort ?? 0)}`;
  }

  /** The client certificate of a TLS connection (peerIdentity reads it); undefined in plaintext. */
  [peerCertificateOf](): PeerCertificate | undefined {
    const s = this.session.socket as Partial<TLSSocket>;
    if (s.getPeerCertificate === undefined || s.authorized !== true) return undefined;
    return s.getPeerCertificate();
  }

  get responseHeader(): Metadata {
    this.header ??= new Metadata();
    return this.header;
  }

  get responseTrailer(): Metadata {
    this.trailer ??= new Metadata();
    return this.trailer;
  }

  headerFields(): OutgoingHttpHeaders {
    return this.header === undefined ? {} : this.header.toHttp2Headers();
  }

  trailerFields(): OutgoingHttpHeaders {
    return this.trailer === undefined ? {} : this.trailer.toHttp2Headers();
  }
}

/** The status trailers for an error (what it shows is decided by `wireStatus`, as for GrpcServer). */
function errorTrailers(err: unknown, ctx: LeanContext | undefined): OutgoingHttpHeaders {
  const w = wireStatus(err);
  const out: OutgoingHttpHeaders = { ...ctx?.trailerFields(), "grpc-status": String(w.code), "grpc-message": encodeGrpcMessage(w.message) };
  if (w.detailsJson !== undefined) out[detailsTrailerKey] = w.detailsJson;
  return out;
}

/**
 * A gRPC server over node:http2 for services whose typed methods are unary or
 * server-streaming (raw handlers, `addRawService`, take every kind, streaming
 * requests included), with the same typed handlers and `HandlerContext` as
 * `GrpcServer` (signal on cancel, deadline and completion; metadata both ways;
 * WardenError → status with details in trailers; size limits; a request that
 * does not decode is INVALID_ARGUMENT). It also serves
 * grpc.health.v1. Built for the coordinator's inference data plane, where the
 * grpc-js server's per-call layers (interceptors, channelz, call objects) are
 * most of the proxy's cost. TLS (and mutual TLS) when given a certificate.
 */
export class LeanGrpcServer {
  readonly health = new HealthStatus();
  private readonly routes = new Map<string, Route>();
  private readonly maxReceive: number;
  private readonly maxSend: number;
  private readonly maxStreams: number;
  private server: Http2Server | Http2SecureServer | undefined;
  private tls: TlsMaterial | undefined;
  private readonly insecure: boolean;
  private readonly maxMetadata: number;
  private readonly sessions = new Set<ServerHttp2Session>();
  private readonly live = new Set<AbortController>();

  constructor(options: LeanServerOptions = {}) {
    this.maxReceive = options.maxReceiveMessageBytes ?? defaultMaxMessageBytes;
    this.maxSend = options.maxSendMessageBytes ?? defaultMaxMessageBytes;
    this.maxStreams = options.maxConcurrentStreams ?? defaultMaxConcurrentStreams;
    this.tls = options.tls;
    this.insecure = options.insecure ?? false;
    this.maxMetadata = options.maxMetadataBytes ?? defaultMaxMetadataBytes;
    this.addRoutes(Health, this.health.impl());
    this.health.set("", ServingStatus.NOT_SERVING);
  }

  private addRoutes<T extends DescService>(svc: T, impl: ServiceImpl<T>): void {
    const byName = impl as unknown as Record<string, AnyHandler | undefined>;
    for (const m of svc.methods) {
      const handler = byName[m.localName];
      if (handler === undefined) throw new WardenError(Code.Internal, `${svc.typeName}: no handler for ${m.name}`);
      this.routes.set(methodPath(m), { method: m, handler, raw: false, streamIn: false });
    }
  }

  /** Adds a service; its health status starts SERVING. */
  add<T extends DescService>(svc: T, impl: ServiceImpl<T>): this {
    if (this.server !== undefined) throw new WardenError(Code.FailedPrecondition, `cannot add ${svc.typeName} after listen`);
    this.addRoutes(svc, impl);
    this.health.set(svc.typeName, ServingStatus.SERVING);
    return this;
  }

  /** Serves one unary method of an added service on bytes instead of its typed handler. */
  addRawUnary(method: DescMethod, handler: RawUnaryHandler): this {
    const path = methodPath(method);
    if (this.server !== undefined) throw new WardenError(Code.FailedPrecondition, `cannot change ${path} after listen`);
    if (method.methodKind !== "unary" || !this.routes.has(path)) throw new WardenError(Code.InvalidArgument, `${path}: a raw handler replaces the handler of a unary method of an added service`);
    this.routes.set(path, { method, handler: handler as AnyHandler, raw: true, streamIn: false });
    return this;
  }

  /** Serves every method of a service on bytes (a proxy's pass-through); its health status starts SERVING. */
  addRawService(svc: DescService, handlers: RawServiceHandlers): this {
    if (this.server !== undefined) throw new WardenError(Code.FailedPrecondition, `cannot add ${svc.typeName} after listen`);
    for (const m of svc.methods) {
      const streamIn = m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming";
      const handler = m.methodKind === "unary" ? handlers.unary(m) : m.methodKind === "server_streaming" ? handlers.serverStream(m) : handlers.stream(m);
      this.routes.set(methodPath(m), { method: m, handler: handler as AnyHandler, raw: true, streamIn });
    }
    this.health.set(svc.typeName, ServingStatus.SERVING);
    return this;
  }

  /** Binds `host:port` (port 0 picks a free one) and marks the server SERVING. */
  listen(address: string): Promise<ListenResult> {
    const colon = address.lastIndexOf(":");
    const host = address.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
    const port = Number(address.slice(colon + 1));
    if (colon < 0 || !Number.isInteger(port) || port < 0 || port > 65_535) return Promise.reject(new WardenError(Code.InvalidArgument, `listen address "${address}" is not host:port`));
    try {
      checkPlaintextListen(address, { tls: this.tls !== undefined, insecure: this.insecure });
    } catch (err) {
      return Promise.reject(WardenError.from(err));
    }
    // noDelay: replies are small writes that must not wait for an ACK. Per
    // connection: at most maxStreams calls at once, and a memory bound sized
    // from the reply limit (see sessionMemoryMiB).
    const common = { maxSessionMemory: sessionMemoryMiB(this.maxSend), settings: { maxConcurrentStreams: this.maxStreams }, noDelay: true };
    const tls = this.tls;
    const server =
      tls === undefined
        ? createServer(common as Parameters<typeof createServer>[0])
        : // With a CA: a client without a certificate that CA signed fails the handshake.
          createSecureServer({ ...common, ...secureContextOptions(tls), requestCert: tls.ca !== undefined, rejectUnauthorized: tls.ca !== undefined } as Parameters<typeof createSecureServer>[0]);
    // A failed handshake (no or a foreign client certificate, a plaintext client) is the client's problem, not ours.
    server.on("tlsClientError", () => undefined);
    server.on("session", (s: ServerHttp2Session) => {
      this.sessions.add(s);
      s.on("close", () => this.sessions.delete(s));
      s.on("error", () => undefined);
    });
    server.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
      this.serve(stream, headers);
    });
    return new Promise((resolve, reject) => {
      server.once("error", (err: Error) => {
        reject(new WardenError(Code.Unavailable, `cannot listen on ${address}: ${err.message}`, { cause: err }));
      });
      server.listen(port, host, () => {
        this.server = server;
        this.health.set("", ServingStatus.SERVING);
        const bound = (server.address() as { port: number }).port;
        resolve({ port: bound, address: `${host === "0.0.0.0" || host === "::" ? "127.0.0.1" : address.slice(0, colon)}:${String(bound)}` });
      });
    });
  }

  /**
   * New TLS handshakes use `material`; the listener and the connections it
   * already has stay. The mutual-TLS setting (a CA or none) cannot change.
   */
  updateTls(material: TlsMaterial): void {
    const current = this.tls;
    if (current === undefined) throw new WardenError(Code.FailedPrecondition, "this server serves plaintext: no certificate to replace");
    if ((material.ca !== undefined) !== (current.ca !== undefined)) throw new WardenError(Code.FailedPrecondition, "a reload cannot turn mutual TLS on or off; restart to change tls.ca");
    this.tls = material;
    (this.server as Http2SecureServer | undefined)?.setSecureContext(secureContextOptions(material));
  }

  /** Marks every service NOT_SERVING (ending Health/Watch streams), waits up to `graceMs` for calls to finish, then closes the rest; says which happened. */
  async shutdown(graceMs = 5_000): Promise<ShutdownOutcome> {
    this.health.shutdown();
    const server = this.server;
    if (server === undefined) return "drained";
    const closed = new Promise<void>((resolve) => server.close(() => { resolve(); }));
    for (const s of this.sessions) s.close();
    let outcome: ShutdownOutcome = "drained";
    const timer = setTimeout(() => {
      outcome = "forced";
      for (const c of this.live) c.abort(new WardenError(Code.Unavailable, "server shutting down"));
      for (const s of this.sessions) s.destroy();
    }, graceMs);
    await closed;
    clearTimeout(timer);
    return outcome;
  }

  private serve(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    const contentType = headers[h2.HTTP2_HEADER_CONTENT_TYPE];
    if (headers[h2.HTTP2_HEADER_METHOD] !== "POST" || typeof contentType !== "string" || !contentType.startsWith("application/grpc")) {
      stream.respond({ [h2.HTTP2_HEADER_STATUS]: 415 }, { endStream: true });
      return;
    }
    const path = String(headers[h2.HTTP2_HEADER_PATH] ?? "");
    const route = this.routes.get(path);
    if (route !== undefined && !route.streamIn && route.method.methodKind !== "unary" && route.method.methodKind !== "server_streaming") {
      // Typed handlers here take one request; streaming requests are served raw only (addRawStream).
      trailersOnly(stream, errorTrailers(new WardenError(Code.Unimplemented, `${path} (${route.method.methodKind}) is not served on this listener`), undefined));
      return;
    }
    if (route === undefined) {
      trailersOnly(stream, errorTrailers(new WardenError(Code.Unimplemented, `unknown method ${path}`), undefined));
      return;
    }
    const metadataBytes = headerListBytes(headers);
    if (metadataBytes > this.maxMetadata) {
      trailersOnly(stream, errorTrailers(metadataTooLarge(metadataBytes, this.maxMetadata), undefined));
      return;
    }
    const encoding = headers["grpc-encoding"];
    if (encoding !== undefined && encoding !== "identity") {
      trailersOnly(stream, errorTrailers(new WardenError(Code.Unimplemented, `grpc-encoding ${String(encoding)} is not supported`), undefined));
      return;
    }
    new ServerCall(stream, headers, route, this.live, this.maxReceive, this.maxSend).start();
  }
}

/** Answers with the status alone (no reply): the headers carry it and end the stream. */
function trailersOnly(stream: ServerHttp2Stream, t: OutgoingHttpHeaders): void {
  if (stream.closed || stream.headersSent) return;
  stream.respond({ [h2.HTTP2_HEADER_STATUS]: 200, [h2.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", ...t }, { endStream: true });
}

/**
 * One call on the lean server, from its request bytes to its trailers. A
 * class with prototype methods and anonymous listener arrows rather than a
 * function of named closures: this runs per routed call, and under tsx every
 * named closure costs a `name` definition per call.
 */
class ServerCall {
  private readonly controller = new AbortController();
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
    private readonly live: Set<AbortController>,
    maxReceive: number,
    private readonly maxSend: number,
  ) {
    const timeoutMs = parseGrpcTimeout(headers["grpc-timeout"]);
    this.ctx = new LeanContext(this.controller, headers, stream.session as ServerHttp2Session, timeoutMs === undefined ? undefined : Date.now() + timeoutMs);
    this.reader = new MessageReader(maxReceive, "request");
  }

  start(): void {
    const stream = this.stream;
    this.live.add(this.controller);
    const deadlineAtMs = this.ctx.deadlineAtMs;
    if (deadlineAtMs !== undefined) {
      this.cancelTimer = deadlineTimer(deadlineAtMs - Date.now(), () => {
        const e = new WardenError(Code.DeadlineExceeded, "call deadline exceeded");
        this.controller.abort(e);
        this.fail(e);
      });
    }
    // A client cancel or a dropped connection closes the stream before we finished.
    stream.on("close", () => {
      this.onClose();
    });
    stream.on("error", () => undefined);
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
    this.controller.abort(expired ? new WardenError(Code.DeadlineExceeded, "call deadline exceeded") : new WardenError(Code.Canceled, "call cancelled by the client"));
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
    this.live.delete(this.controller);
    if (!this.controller.signal.aborted) this.controller.abort(callCompleted);
    this.requests?.fail(this.controller.signal.reason);
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
    if (!this.stream.headersSent) this.stream.respond({ [h2.HTTP2_HEADER_STATUS]: 200, [h2.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc", ...this.ctx.headerFields() }, { waitForTrailers: true });
  }

  /** Ends the reply; the OK trailers follow when HTTP/2 asks for them. */
  private endOk(body?: Buffer): void {
    const stream = this.stream;
    stream.once("wantTrailers", () => {
      stream.sendTrailers({ ...this.ctx.trailerFields(), "grpc-status": "0" });
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
        if (ctx.signal.aborted || stream.closed) break;
        this.respondHeaders();
        if (!stream.write(this.encode(msg))) await drained(stream, ctx.signal);
      }
    } catch (err) {
      this.fail(err);
      return;
    }
    if (stream.closed || ctx.signal.aborted) {
      this.finish();
      return;
    }
    this.respondHeaders();
    this.endOk();
  }
}

/** Resolves when the stream can take more, or the call's signal fires. */
function drained(stream: ServerHttp2Stream, signal: AbortSignal): Promise<void> {
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
