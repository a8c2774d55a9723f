import { Client as GrpcClient, Metadata, credentials as grpcCredentials, type CallOptions as GrpcCallOptions, type ChannelCredentials, type ClientDuplexStream, type ServiceError } from "@grpc/grpc-js";
import { create, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { checkServerIdentity } from "node:tls";
import { abortReason } from "@warden/common";
import { fromGrpcError } from "./codes.js";
import { methodDefinition } from "./service-definition.js";
import type { CallOptions, Client } from "./types.js";
import { defaultMaxMessageBytes } from "./limits.js";
import type { ClientTls } from "./tls-material.js";

/** grpc-js channel credentials for `tls`. */
export function channelCredentialsOf(tls: ClientTls): ChannelCredentials {
  const verify = tls.verify;
  if (verify === undefined) return grpcCredentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null);
  // grpc-js calls this on every handshake (with the overridden name when serverName is set), so a reconnect is checked again.
  return grpcCredentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null, { checkServerIdentity: (host, cert) => checkServerIdentity(host, cert) ?? verify(cert) });
}

export interface CreateClientOptions {
  /** @default insecure (loopback and tests); see also `tls` */
  credentials?: ChannelCredentials;
  /** TLS from PEM bytes (used when `credentials` is not given): verify the server against `ca`, present `cert`/`key` for mutual TLS. */
  tls?: ClientTls;
  /** @default 50 MiB */
  maxReceiveMessageBytes?: number;
  /** @default 50 MiB */
  maxSendMessageBytes?: number;
  /** Extra grpc-js channel options. */
  channelOptions?: Record<string, string | number>;
  /** Metadata sent with every call (e.g. `bearerMetadata(token)`); a call's own metadata wins. */
  headers?: Readonly<Record<string, string>>;
}

/** The call's metadata: the client's headers under the call's own. */
function metadataOf(headers: Readonly<Record<string, string>> | undefined, opts: CallOptions | undefined): Metadata {
  if (headers === undefined) return opts?.metadata ?? new Metadata();
  const md = opts?.metadata?.clone() ?? new Metadata();
  for (const [k, v] of Object.entries(headers)) if (md.get(k).length === 0) md.set(k, v);
  return md;
}

function grpcCallOptions(opts: CallOptions | undefined): GrpcCallOptions {
  const deadlines: number[] = [];
  if (opts?.timeoutMs !== undefined) deadlines.push(Date.now() + opts.timeoutMs);
  if (opts?.deadlineAtMs !== undefined) deadlines.push(opts.deadlineAtMs);
  return deadlines.length > 0 ? { deadline: new Date(Math.min(...deadlines)) } : {};
}

interface CallLike {
  cancel(): void;
  on(event: "metadata", fn: (md: Metadata) => void): unknown;
  on(event: "status", fn: (s: { metadata: Metadata }) => void): unknown;
}

function hook(call: CallLike, opts: CallOptions | undefined): () => void {
  if (opts?.onHeader !== undefined) call.on("metadata", opts.onHeader);
  if (opts?.onTrailer !== undefined) {
    const onTrailer = opts.onTrailer;
    call.on("status", (s) => {
      onTrailer(s.metadata);
    });
  }
  const signal = opts?.signal;
  if (signal === undefined) return () => {};
  const onAbort = (): void => {
    call.cancel();
  };
  signal.addEventListener("abort", onAbort, { once: true });
  return () => {
    signal.removeEventListener("abort", onAbort);
  };
}

function toMessage(schema: DescMessage, value: unknown): object {
  return create(schema, value as never);
}

function unaryCall(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined) {
  const def = methodDefinition(m);
  return (request: unknown, opts?: CallOptions): Promise<unknown> => {
    if (opts?.signal?.aborted === true) return Promise.reject(abortReason(opts.signal));
    return new Promise((resolve, reject) => {
      let unhook = (): void => {};
      const call = client.makeUnaryRequest(
        def.path,
        def.requestSerialize,
        def.responseDeserialize,
        toMessage(m.input, request),
        metadataOf(headers, opts),
        grpcCallOptions(opts),
        (err: ServiceError | null, value?: unknown) => {
          unhook();
          if (err !== null) reject(opts?.signal?.aborted === true ? abortReason(opts.signal) : fromGrpcError(err));
          else resolve(value);
        },
      );
      unhook = hook(call, opts);
    });
  };
}

async function* readAll(stream: AsyncIterable<unknown>, opts: CallOptions | undefined, unhook: () => void): AsyncGenerator {
  try {
    for await (const msg of stream) yield msg;
  } catch (err) {
    if (opts?.signal?.aborted === true) throw abortReason(opts.signal);
    throw fromGrpcError(err);
  } finally {
    unhook();
  }
}

function serverStreamCall(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined) {
  const def = methodDefinition(m);
  return (request: unknown, opts?: CallOptions): AsyncIterable<unknown> => {
    const call = client.makeServerStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, toMessage(m.input, request), metadataOf(headers, opts), grpcCallOptions(opts));
    const unhook = hook(call, opts);
    const gen = readAll(call, opts, unhook);
    // Leaving the loop early (break/return) cancels the RPC instead of leaking it.
    return {
      [Symbol.asyncIterator]() {
        const it = gen[Symbol.asyncIterator]();
        return {
          next: () => it.next(),
          return: (v?: unknown) => {
            call.cancel();
            return it.return(v);
          },
        };
      },
    };
  };
}

async function pump(call: ClientDuplexStream<unknown, object>, schema: DescMessage, requests: AsyncIterable<unknown>): Promise<void> {
  try {
    for await (const r of requests) {
      if (!call.write(toMessage(schema, r))) await new Promise((resolve) => call.once("drain", resolve));
    }
    call.end();
  } catch {
    call.cancel();
  }
}

function bidiCall(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined) {
  const def = methodDefinition(m);
  return (requests: AsyncIterable<unknown>, opts?: CallOptions): AsyncIterable<unknown> => {
    const call = client.makeBidiStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, metadataOf(headers, opts), grpcCallOptions(opts));
    const unhook = hook(call, opts);
    void pump(call, m.input, requests);
    return readAll(call, opts, unhook);
  };
}

function clientStreamCall(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined) {
  const def = methodDefinition(m);
  return (requests: AsyncIterable<unknown>, opts?: CallOptions): Promise<unknown> =>
    new Promise((resolve, reject) => {
      let unhook = (): void => {};
      const call = client.makeClientStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, metadataOf(headers, opts), grpcCallOptions(opts), (err: ServiceError | null, value?: unknown) => {
        unhook();
        if (err !== null) reject(fromGrpcError(err));
        else resolve(value);
      });
      unhook = hook(call, opts);
      void (async () => {
        try {
          for await (const r of requests) call.write(toMessage(m.input, r));
          call.end();
        } catch {
          call.cancel();
        }
      })();
    });
}

/**
 * A promise / async-iterator client for a protobuf-es service over grpc-js.
 * Errors are WardenErrors carrying the gRPC status code; an aborted signal
 * rejects with the signal's reason.
 */
export function createClient<T extends DescService>(svc: T, address: string, options: CreateClientOptions = {}): Client<T> {
  const creds = options.credentials ?? (options.tls === undefined ? grpcCredentials.createInsecure() : channelCredentialsOf(options.tls));
  const client = new GrpcClient(address, creds, {
    "grpc.max_receive_message_length": options.maxReceiveMessageBytes ?? defaultMaxMessageBytes,
    "grpc.max_send_message_length": options.maxSendMessageBytes ?? defaultMaxMessageBytes,
    ...(options.tls?.serverName === undefined ? {} : { "grpc.ssl_target_name_override": options.tls.serverName, "grpc.default_authority": options.tls.serverName }),
    ...options.channelOptions,
  });
  const out: Record<string, unknown> = {
    close() {
      client.close();
    },
  };
  for (const m of svc.methods) {
    switch (m.methodKind) {
      case "unary":
        out[m.localName] = unaryCall(client, m, options.headers);
        break;
      case "server_streaming":
        out[m.localName] = serverStreamCall(client, m, options.headers);
        break;
      case "bidi_streaming":
        out[m.localName] = bidiCall(client, m, options.headers);
        break;
      case "client_streaming":
        out[m.localName] = clientStreamCall(client, m, options.headers);
        break;
    }
  }
  return out as Client<T>;
}
