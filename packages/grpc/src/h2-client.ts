import { create, fromBinary, toBinary, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import { startCall, type H2CallOptions } from "./h2-client-call.js";
import { H2Connection } from "./h2-connection.js";
import { defaultMaxMessageBytes } from "./limits.js";
import { lazyMethods } from "./lazy-methods.js";
import { methodPath } from "./service-definition.js";
import type { CallOptions, Client } from "./types.js";
import type { ClientTls } from "./tls-material.js";

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

/** One unary call on encoded bytes: resolves with the reply's bytes. */
function unaryBytes(conn: H2Connection, authority: string, path: string, request: Uint8Array, opts: H2CallOptions | undefined, maxReceive: number, maxSend: number): Promise<Uint8Array> {
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

function unaryMethod(conn: H2Connection, authority: string, m: DescMethod, maxReceive: number, maxSend: number) {
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
function replyStream(conn: H2Connection, authority: string, path: string, request: Uint8Array | AsyncIterable<Uint8Array>, opts: CallOptions | undefined, maxReceive: number, maxSend: number, decode: (bytes: Uint8Array) => unknown): AsyncIterable<unknown> {
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

function serverStreamMethod(conn: H2Connection, authority: string, m: DescMethod, maxReceive: number, maxSend: number) {
  const path = methodPath(m);
  const decode = (bytes: Uint8Array): unknown => fromBinary(m.output, bytes);
  return (request: unknown, opts?: CallOptions): AsyncIterable<unknown> => replyStream(conn, authority, path, toBinary(m.input, create(m.input, request as never)), opts, maxReceive, maxSend, decode);
}

/** A bidi-streaming method: requests encoded as they come (written with backpressure), replies decoded as they arrive. */
function bidiStreamMethod(conn: H2Connection, authority: string, m: DescMethod, maxReceive: number, maxSend: number) {
  const path = methodPath(m);
  const decode = (bytes: Uint8Array): unknown => fromBinary(m.output, bytes);
  return (requests: AsyncIterable<unknown>, opts?: CallOptions): AsyncIterable<unknown> => {
    const encoded = (async function* () {
      for await (const r of requests) yield toBinary(m.input, create(m.input, r as never));
    })();
    return replyStream(conn, authority, path, encoded, opts, maxReceive, maxSend, decode);
  };
}

/**
 * A lean gRPC client over node:http2 for services whose methods are unary,
 * server-streaming or bidi-streaming, with the same `Client<T>` surface and error mapping as
 * `createClient`: deadlines (sent as grpc-timeout and enforced locally),
 * AbortSignal cancel (RST_STREAM CANCEL), metadata both ways, WardenError
 * details from trailers, message size limits, and UNAVAILABLE when the
 * connection drops. Plaintext, or TLS with `options.tls`; meant for the
 * coordinator's hot proxy hop to backends and the CLI's admin calls.
 */
export function createH2Client<T extends DescService>(svc: T, address: string, options: H2ClientOptions = {}): H2Client<T> {
  const conn = new H2Connection(address, options.tls, options.headers);
  const maxReceive = options.maxReceiveMessageBytes ?? defaultMaxMessageBytes;
  const maxSend = options.maxSendMessageBytes ?? defaultMaxMessageBytes;
  const base = {
    close() {
      conn.close();
    },
    unaryBytes(method: DescMethod, request: Uint8Array, opts?: H2CallOptions): Promise<Uint8Array> {
      return unaryBytes(conn, address, methodPath(method), request, opts, maxReceive, maxSend);
    },
    streamBytes(method: DescMethod, requests: Uint8Array | AsyncIterable<Uint8Array>, opts?: CallOptions): AsyncIterable<Uint8Array> {
      return replyStream(conn, address, methodPath(method), requests, opts, maxReceive, maxSend, asBytes) as AsyncIterable<Uint8Array>;
    },
  };
  return lazyMethods(svc, base, (m) => {
    if (m.methodKind === "unary") return unaryMethod(conn, address, m, maxReceive, maxSend);
    if (m.methodKind === "server_streaming") return serverStreamMethod(conn, address, m, maxReceive, maxSend);
    if (m.methodKind === "bidi_streaming") return bidiStreamMethod(conn, address, m, maxReceive, maxSend);
    // Client-streaming requests go raw through `streamBytes`; a typed call says so rather than failing construction.
    const why = `createH2Client's typed methods are unary, server-streaming and bidi-streaming; ${m.parent.typeName}.${m.name} is ${m.methodKind}`;
    return () => {
      throw new WardenError(Code.Unimplemented, why);
    };
  }) as H2Client<T>;
}

/** The lean client: the typed methods, plus a unary call on already-encoded bytes (a proxy's pass-through). */
export type H2Client<T extends DescService> = Client<T> & {
  unaryBytes(method: DescMethod, request: Uint8Array, opts?: H2CallOptions): Promise<Uint8Array>;
  /**
   * A streaming call on encoded bytes, any kind but unary: one request (server
   * streaming) or requests as they come (client and bidi streaming, written
   * with backpressure), the replies' bytes as they arrive.
   */
  streamBytes(method: DescMethod, requests: Uint8Array | AsyncIterable<Uint8Array>, opts?: CallOptions): AsyncIterable<Uint8Array>;
};
