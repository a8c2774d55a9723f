import type { EventEmitter } from "node:events";
import { Server, ServerCredentials, type UntypedServiceImplementation } from "@grpc/grpc-js";
import type { DescService } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import { Health, ServerReflection, reflectionV1alpha } from "@warden/proto";
import { grpcServerDefinition, methodDefinition } from "./service-definition.js";
import type { RawServiceHandlers } from "./lean-server.js";
import { rawClientStreaming } from "./unimplemented.js";
import { wrapHandler } from "./server-handlers.js";
import { HealthStatus, ServingStatus } from "./health.js";
import { ReflectionIndex } from "./reflection.js";
import { defaultMaxConcurrentStreams, defaultMaxMessageBytes, defaultMaxMetadataBytes } from "./limits.js";
import { guardMetadata } from "./metadata-limit.js";
import type { ServiceImpl } from "./types.js";
import { checkPlaintextListen } from "./listen-guard.js";
import { defaultPeerCaps, guardHttp2Server, type PeerCaps } from "./peer-caps.js";
import { releaseDecodedSlices } from "./decoder-release.js";

/** grpc-js listeners already guarded (a server may listen on several addresses). */
const guarded = new WeakSet<EventEmitter>();

export interface CreateServerOptions {
  /** @default 50 MiB */
  maxReceiveMessageBytes?: number;
  /** @default 50 MiB */
  maxSendMessageBytes?: number;
  /** Request metadata one call may carry; beyond it RESOURCE_EXHAUSTED. @default 16 KiB */
  maxMetadataBytes?: number;
  /** Concurrent calls one connection may run (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). @default 256 */
  maxConcurrentStreams?: number;
  /** @default insecure (plaintext: loopback only, unless `insecure`) */
  credentials?: ServerCredentials;
  /** Allow plaintext on a non-loopback address (see checkPlaintextListen). @default false */
  insecure?: boolean;
  /** Connections per peer and in total, handshake and idle timeouts (peer-caps.ts). @default defaultPeerCaps */
  peerCaps?: PeerCaps;
}

export interface AddServiceOptions {
  /**
   * Methods (by localName) whose requests reach the handler as their bytes,
   * EncodedRequest objects it decodes when ready for them (encoded-request.ts),
   * rather than decoded as they arrive. Each must be a method of the service.
   */
  readonly encodedRequests?: readonly string[];
}

/** How a shutdown ended: every call finished within the grace, or the rest were forced closed. */
export type ShutdownOutcome = "drained" | "forced";

export interface ListenResult {
  /** The bound port (useful with port 0). */
  port: number;
  /** host:port to give to clients. */
  address: string;
}

/**
 * A grpc-js server that serves protobuf-es services with typed handlers, and
 * always serves grpc.health.v1 and server reflection (v1 and v1alpha) listing
 * every added service. A request that does not decode is INVALID_ARGUMENT
 * (see UndecodableRequest), for every method kind.
 */
export class GrpcServer {
  readonly raw: Server;
  readonly health = new HealthStatus();
  private readonly reflection = new ReflectionIndex();
  private readonly credentials: ServerCredentials;
  private readonly insecure: boolean;
  private readonly maxMetadataBytes: number;
  private readonly peerCaps: PeerCaps;
  private listening = false;
  /** Every call's signal while it runs (server-handlers.ts scope): a forced shutdown ends them UNAVAILABLE. */
  private readonly live = new Set<AbortController>();

  constructor(options: CreateServerOptions = {}) {
    // Each call's decoder lets go of its last message's slices (decoder-release.ts).
    releaseDecodedSlices();
    this.raw = new Server({
      "grpc.max_receive_message_length": options.maxReceiveMessageBytes ?? defaultMaxMessageBytes,
      "grpc.max_send_message_length": options.maxSendMessageBytes ?? defaultMaxMessageBytes,
      "grpc.max_concurrent_streams": options.maxConcurrentStreams ?? defaultMaxConcurrentStreams,
      // Nothing reads channelz (no channelz service is served); on, it counts and tracks every call and session.
      "grpc.enable_channelz": 0,
    });
    this.credentials = options.credentials ?? ServerCredentials.createInsecure();
    this.insecure = options.insecure ?? false;
    this.maxMetadataBytes = options.maxMetadataBytes ?? defaultMaxMetadataBytes;
    this.peerCaps = options.peerCaps ?? defaultPeerCaps;
    this.addUntracked(Health, this.health.impl());
    const reflect = this.reflection.handler();
    this.addUntracked(ServerReflection, { serverReflectionInfo: reflect });
    this.addUntracked(reflectionV1alpha.ServerReflection, { serverReflectionInfo: reflect as never });
    this.health.set("", ServingStatus.NOT_SERVING);
  }

  private addUntracked<T extends DescService>(svc: T, impl: ServiceImpl<T>, options: AddServiceOptions = {}): void {
    const encoded = new Set(options.encodedRequests ?? []);
    for (const name of encoded) if (!svc.methods.some((m) => m.localName === name)) throw new WardenError(Code.Internal, `${svc.typeName}: encodedRequests names ${name}, not one of its methods`);
    const handlers: UntypedServiceImplementation = {};
    const byName = impl as unknown as Record<string, (input: unknown, ctx: never) => unknown>;
    for (const m of svc.methods) {
      const h = byName[m.localName];
      if (h === undefined) throw new WardenError(Code.Internal, `${svc.typeName}: no handler for ${m.name}`);
      const streamsReplies = m.methodKind === "server_streaming" || m.methodKind === "bidi_streaming";
      handlers[m.localName] = wrapHandler(m, guardMetadata(streamsReplies, h as never, this.maxMetadataBytes), this.live);
    }
    this.raw.addService(grpcServerDefinition(svc, encoded), handlers);
    this.reflection.add(svc);
  }

  /**
   * Adds a service; its health status starts SERVING. The methods named in
   * `options.encodedRequests` are handed their requests as EncodedRequests:
   * their handlers take `RequestBytes` where `impl`'s type says messages.
   */
  add<T extends DescService>(svc: T, impl: ServiceImpl<T>, options?: AddServiceOptions): this {
    if (this.listening) throw new WardenError(Code.FailedPrecondition, `cannot add ${svc.typeName} after listen`);
    this.addUntracked(svc, impl, options);
    this.health.set(svc.typeName, ServingStatus.SERVING);
    return this;
  }

  /** Serves every method of a service on bytes (a proxy's pass-through), as LeanGrpcServer.addRawService; its health status starts SERVING. */
  addRawService(svc: DescService, handlers: RawServiceHandlers): this {
    if (this.listening) throw new WardenError(Code.FailedPrecondition, `cannot add ${svc.typeName} after listen`);
    const asBuffer = (v: unknown): Buffer => {
      const u = v as Uint8Array;
      return Buffer.from(u.buffer, u.byteOffset, u.length);
    };
    const asIs = (b: Buffer): Buffer => b;
    const def: Record<string, ReturnType<typeof methodDefinition>> = {};
    const impl: UntypedServiceImplementation = {};
    for (const m of svc.methods) {
      def[m.localName] = { ...methodDefinition(m), requestSerialize: asBuffer, requestDeserialize: asIs, responseSerialize: asBuffer, responseDeserialize: asIs };
      const h = m.methodKind === "unary" ? handlers.unary(m) : m.methodKind === "server_streaming" ? handlers.serverStream(m) : m.methodKind === "bidi_streaming" ? handlers.stream(m) : rawClientStreaming(handlers.stream(m));
      impl[m.localName] = wrapHandler(m, h as (input: unknown, ctx: unknown) => unknown, this.live);
    }
    this.raw.addService(def, impl);
    this.reflection.add(svc);
    this.health.set(svc.typeName, ServingStatus.SERVING);
    return this;
  }

  /** Binds `host:port` (port 0 picks a free one) and marks the server SERVING. */
  listen(address: string): Promise<ListenResult> {
    try {
      checkPlaintextListen(address, { tls: this.credentials._isSecure(), insecure: this.insecure });
    } catch (err) {
      return Promise.reject(WardenError.from(err));
    }
    return new Promise((resolve, reject) => {
      this.raw.bindAsync(address, this.credentials, (err, port) => {
        if (err !== null) {
          reject(new WardenError(Code.Unavailable, `cannot listen on ${address}: ${err.message}`, { cause: err }));
          return;
        }
        this.listening = true;
        try {
          this.guardListeners();
        } catch (e) {
          this.raw.forceShutdown();
          reject(WardenError.from(e));
          return;
        }
        this.health.set("", ServingStatus.SERVING);
        const host = address.slice(0, address.lastIndexOf(":"));
        resolve({ port, address: `${host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host}:${String(port)}` });
      });
    });
  }

  /**
   * Puts the peer caps on the HTTP/2 servers grpc-js bound. grpc-js has no
   * hook for its connections, so this reaches its listener map (pinned
   * version); if that ever changes, listen fails here rather than serving
   * without caps.
   */
  private guardListeners(): void {
    const servers = (this.raw as unknown as { http2Servers?: unknown }).http2Servers;
    if (!(servers instanceof Map) || servers.size === 0) throw new WardenError(Code.Internal, "@grpc/grpc-js no longer exposes its listeners: cannot put the per-peer connection caps on them");
    for (const s of servers.keys() as IterableIterator<EventEmitter>) {
      if (guarded.has(s)) continue;
      guarded.add(s);
      guardHttp2Server(s, this.peerCaps);
    }
  }

  /**
   * Marks every service NOT_SERVING (ending Health/Watch streams), waits up
   * to `graceMs` for calls to finish, then forces the rest closed. Says which
   * happened: "forced" means some call was still open after the grace (a
   * stream its handler never ends, or a slow call), so the caller can say so.
   */
  async shutdown(graceMs = 5_000): Promise<ShutdownOutcome> {
    this.health.shutdown();
    return await new Promise<ShutdownOutcome>((resolve) => {
      let forced = false;
      const t = setTimeout(() => {
        forced = true;
        // Calls still open end UNAVAILABLE (retry: this server is going away), and get a moment to
        // send it: grpc-js's forceShutdown resets the streams, which a client reads as CANCELLED.
        for (const ctl of this.live) ctl.abort(new WardenError(Code.Unavailable, "server shutting down"));
        setTimeout(() => {
          this.raw.forceShutdown();
          resolve("forced");
        }, this.live.size === 0 ? 0 : 100);
      }, graceMs);
      this.raw.tryShutdown(() => {
        clearTimeout(t);
        resolve(forced ? "forced" : "drained");
      });
    });
  }
}
