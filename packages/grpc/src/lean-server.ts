import { createSecureServer, createServer, constants as h2, type Http2SecureServer, type Http2Server, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from "node:http2";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, WardenError, type CallSignal } from "@warden/common";
import { Health } from "@warden/proto";
import { HealthStatus, ServingStatus } from "./health.js";
import { LeanServerCall, errorTrailers, trailersOnly, type AnyHandler, type Route } from "./lean-server-call.js";
import { defaultMaxConcurrentStreams, defaultMaxMessageBytes, defaultMaxMetadataBytes, sessionMemoryMiB } from "./limits.js";
import { headerListBytes, headerListWithin, metadataTooLarge } from "./metadata-limit.js";
import { methodPath } from "./service-definition.js";
import type { ListenResult, ShutdownOutcome } from "./server.js";
import type { HandlerContext, ServiceImpl } from "./types.js";
import { checkPlaintextListen } from "./listen-guard.js";
import { secureContextOptions } from "./server-tls.js";
import type { TlsMaterial } from "./tls-material.js";
import { defaultPeerCaps, guardHttp2Server, type PeerCaps } from "./peer-caps.js";

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
  /** Connections per peer and in total, handshake and idle timeouts (peer-caps.ts). @default defaultPeerCaps */
  peerCaps?: PeerCaps;
}

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
  private readonly peerCaps: PeerCaps;
  private readonly sessions = new Set<ServerHttp2Session>();
  private readonly live = new Set<CallSignal>();

  constructor(options: LeanServerOptions = {}) {
    this.maxReceive = options.maxReceiveMessageBytes ?? defaultMaxMessageBytes;
    this.maxSend = options.maxSendMessageBytes ?? defaultMaxMessageBytes;
    this.maxStreams = options.maxConcurrentStreams ?? defaultMaxConcurrentStreams;
    this.tls = options.tls;
    this.insecure = options.insecure ?? false;
    this.maxMetadata = options.maxMetadataBytes ?? defaultMaxMetadataBytes;
    this.peerCaps = options.peerCaps ?? defaultPeerCaps;
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
    guardHttp2Server(server, this.peerCaps);
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
    let flushTimer: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      outcome = "forced";
      for (const c of this.live) c.abort(new WardenError(Code.Unavailable, "server shutting down"));
      // A moment for those calls' UNAVAILABLE trailers to be written: a session destroyed in the
      // same turn resets the streams, which clients read as CANCELLED, not as a retry.
      flushTimer = setTimeout(() => {
        for (const s of this.sessions) s.destroy();
      }, 100);
    }, graceMs);
    await closed;
    clearTimeout(timer);
    clearTimeout(flushTimer);
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
    if (!headerListWithin(headers, this.maxMetadata)) {
      trailersOnly(stream, errorTrailers(metadataTooLarge(headerListBytes(headers), this.maxMetadata), undefined));
      return;
    }
    const encoding = headers["grpc-encoding"];
    if (encoding !== undefined && encoding !== "identity") {
      trailersOnly(stream, errorTrailers(new WardenError(Code.Unimplemented, `grpc-encoding ${String(encoding)} is not supported`), undefined));
      return;
    }
    new LeanServerCall(stream, headers, route, this.live, this.maxReceive, this.maxSend).start();
  }
}

