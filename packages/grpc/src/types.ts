import type { Metadata } from "@grpc/grpc-js";
import type { CallCancel } from "@warden/common";
import type { DescMessage, DescService, MessageInitShape, MessageShape } from "@bufbuild/protobuf";

/** Per-call context given to every handler. */
export interface HandlerContext {
  /** Fires on deadline, client cancel, and completion of the call. */
  readonly signal: AbortSignal;
  /** Request metadata. */
  readonly metadata: Metadata;
  /** Remote peer address. */
  readonly peer: string;
  /** Absolute deadline in epoch ms, when the caller set one. */
  readonly deadlineAtMs: number | undefined;
  /** Metadata sent back as response headers (before the first message). */
  readonly responseHeader: Metadata;
  /** Metadata sent back as trailers (with the status). */
  readonly responseTrailer: Metadata;
  /**
   * The first value of a text metadata key (lower case), as
   * `metadata.get(key)[0]` reads it, without building `metadata`: the lean
   * server offers it for per-call reads on its hot path; elsewhere absent.
   */
  firstMetadataValue?(key: string): string | undefined;
  /**
   * The same cancellation as `signal` (it fires on deadline, client cancel
   * and completion), readable without building the AbortSignal (several
   * microseconds each): the lean server offers it for the hot proxy path,
   * where `signal` is then made only if something asks for it. Elsewhere absent.
   */
  readonly cancel?: CallCancel;
}

type Method<T extends DescService, K extends keyof T["method"]> = T["method"][K];
type In<M> = M extends { input: infer I extends DescMessage } ? MessageShape<I> : never;
type OutInit<M> = M extends { output: infer O extends DescMessage } ? MessageInitShape<O> : never;
type Out<M> = M extends { output: infer O extends DescMessage } ? MessageShape<O> : never;
type InInit<M> = M extends { input: infer I extends DescMessage } ? MessageInitShape<I> : never;

/** A handler for one method, by its kind. Thrown WardenErrors become their status. */
export type MethodHandler<M> = M extends { methodKind: "unary" }
  ? (request: In<M>, ctx: HandlerContext) => Promise<OutInit<M>>
  : M extends { methodKind: "server_streaming" }
    ? (request: In<M>, ctx: HandlerContext) => AsyncIterable<OutInit<M>>
    : M extends { methodKind: "bidi_streaming" }
      ? (requests: AsyncIterable<In<M>>, ctx: HandlerContext) => AsyncIterable<OutInit<M>>
      : M extends { methodKind: "client_streaming" }
        ? (requests: AsyncIterable<In<M>>, ctx: HandlerContext) => Promise<OutInit<M>>
        : never;

/** The implementation of a whole service: one handler per method, by localName. */
export type ServiceImpl<T extends DescService> = { [K in keyof T["method"]]: MethodHandler<Method<T, K>> };

/** Options for one client call. */
export interface CallOptions {
  /** Relative deadline; becomes the gRPC deadline. */
  timeoutMs?: number;
  /** Absolute deadline (epoch ms); the earlier of the two wins. */
  deadlineAtMs?: number;
  /** Aborting cancels the call (CANCELLED on both sides). */
  signal?: AbortSignal;
  metadata?: Metadata;
  /**
   * Liveness bound (unary and server-streaming calls of both clients,
   * createH2Client and createClient): the server must show it is alive
   * within this long — its HTTP/2 SETTINGS on a new connection or a PING
   * answered, before the request is sent, then PINGs answered for as long as
   * the call runs (a stream's server that freezes after its first message
   * ends it too). Else the call ends UNAVAILABLE: before sending with
   * `details.transport = "not-connected"` (it ran nowhere), after with
   * `"unresponsive"` (a paused server may still run it when it resumes). A
   * live server that takes long to answer, or a quiet stream, is not cut: it
   * answers the PINGs (one per connection every quarter bound while calls run).
   */
  answerWithinMs?: number;
  onHeader?: (header: Metadata) => void;
  onTrailer?: (trailer: Metadata) => void;
}

/** A method as seen by a client. */
export type ClientMethod<M> = M extends { methodKind: "unary" }
  ? (request: InInit<M>, options?: CallOptions) => Promise<Out<M>>
  : M extends { methodKind: "server_streaming" }
    ? (request: InInit<M>, options?: CallOptions) => AsyncIterable<Out<M>>
    : M extends { methodKind: "bidi_streaming" }
      ? (requests: AsyncIterable<InInit<M>>, options?: CallOptions) => AsyncIterable<Out<M>>
      : M extends { methodKind: "client_streaming" }
        ? (requests: AsyncIterable<InInit<M>>, options?: CallOptions) => Promise<Out<M>>
        : never;

/** A promise / async-iterator client for a whole service. */
export type Client<T extends DescService> = { [K in keyof T["method"]]: ClientMethod<Method<T, K>> } & {
  /** Closes the underlying channel. */
  close(): void;
};
