import { Client as GrpcClient, Metadata, credentials as grpcCredentials, type CallOptions as GrpcCallOptions, type ChannelCredentials, type ClientDuplexStream, type ServiceError } from "@grpc/grpc-js";
import { create, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { checkServerIdentity } from "node:tls";
import { abortReason, invalidArgument, type WardenError } from "@warden/common";
import { fromGrpcError } from "./codes.js";
import { H2Connection } from "./h2-connection.js";
import { unresponsiveError, watchPeer, whenPeerAnswers } from "./peer-liveness.js";
import { lazyMethods } from "./lazy-methods.js";
import { methodDefinition } from "./service-definition.js";
import type { CallOptions, Client } from "./types.js";
import { defaultMaxMessageBytes } from "./limits.js";
import type { ClientTls } from "./tls-material.js";
import { releaseDecodedSlices } from "./decoder-release.js";

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

/**
 * The liveness side of a grpc-js client, for calls with `answerWithinMs`:
 * grpc-js shows no HTTP/2 PING and counts a connection whose peer never sent
 * SETTINGS as ready (a SIGSTOPped process's kernel still accepts it), so a
 * lean HTTP/2 connection of its own to the same address, with the same TLS,
 * carries only SETTINGS and PINGs and says whether the process answers:
 * before the request is sent (a call failed there ran nowhere) and until the
 * call ends (a stream whose server freezes after its first message ends too).
 * Opened on the first call that asks for the bound.
 */
class LivenessProbe {
  private conn: H2Connection | undefined;

  constructor(
    readonly address: string,
    private readonly options: CreateClientOptions,
  ) {}

  connection(): H2Connection {
    // Opaque grpc-js credentials say nothing a second connection could use.
    if (this.options.credentials !== undefined && this.options.tls === undefined) throw invalidArgument("answerWithinMs", "createClient honours it only with `tls` (or plaintext), not opaque `credentials`");
    return (this.conn ??= new H2Connection(this.address, this.options.tls));
  }

  close(): void {
    this.conn?.close();
  }
}

/** What `hook` needs to bound a call by its server's liveness. */
interface Liveness {
  readonly probe: LivenessProbe;
  readonly withinMs: number;
  /** The call is being cut for silence, with this error (reported instead of grpc-js's CANCELLED). */
  readonly onSilent: (err: WardenError) => void;
}

function hook(call: CallLike, opts: CallOptions | undefined, live?: Liveness): () => void {
  if (opts?.onHeader !== undefined) call.on("metadata", opts.onHeader);
  if (opts?.onTrailer !== undefined) {
    const onTrailer = opts.onTrailer;
    call.on("status", (s) => {
      onTrailer(s.metadata);
    });
  }
  let stopWatch = (): void => {};
  if (live !== undefined) {
    let responding = false;
    call.on("metadata", () => {
      responding = true;
    });
    const conn = live.probe.connection();
    stopWatch = watchPeer(
      () => conn.liveSlot(),
      live.withinMs,
      () => {
        live.onSilent(unresponsiveError(live.probe.address, live.withinMs, responding));
        const slot = conn.liveSlot();
        if (slot !== undefined) conn.retire(slot);
        call.cancel();
      },
    );
  }
  const signal = opts?.signal;
  if (signal === undefined) return stopWatch;
  const onAbort = (): void => {
    call.cancel();
  };
  signal.addEventListener("abort", onAbort, { once: true });
  return () => {
    stopWatch();
    signal.removeEventListener("abort", onAbort);
  };
}

/** The error a grpc-js call failed with, as the caller sees it: its own abort, the liveness cut, or the status. */
function failureOf(err: unknown, opts: CallOptions | undefined, silent: WardenError | undefined): WardenError {
  if (opts?.signal?.aborted === true) return abortReason(opts.signal);
  return silent ?? fromGrpcError(err);
}

function toMessage(schema: DescMessage, value: unknown): object {
  return create(schema, value as never);
}

/**
 * Runs a grpc-js call constructor without a caller stack trace. grpc-js keeps
 * an Error made at the call's start (to append the caller's stack to a failed
 * call's error) until the call ends, and V8 keeps every frame of that stack —
 * the functions and their closures — with it. A long-lived stream (an agent's
 * WatchBackends, a HeartbeatStream) thereby kept whatever was on the stack when
 * it began: the coordinator kept every node's finished Register call, its
 * metadata and decoder, for as long as the node's watch stream lived. Warden's
 * errors never show grpc-js's caller stack (fromGrpcError), so none is taken;
 * it also spares every call the cost of capturing one.
 */
function withoutCallerStack<T>(start: () => T): T {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return start();
  } finally {
    Error.stackTraceLimit = limit;
  }
}

function unaryCall(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined, probe: LivenessProbe) {
  const def = methodDefinition(m);
  return async (request: unknown, opts?: CallOptions): Promise<unknown> => {
    if (opts?.signal?.aborted === true) throw abortReason(opts.signal);
    const withinMs = opts?.answerWithinMs;
    if (withinMs !== undefined) await whenPeerAnswers(probe.connection(), probe.address, opts, withinMs);
    return new Promise((resolve, reject) => {
      let unhook = (): void => {};
      let silent: WardenError | undefined;
      const call = withoutCallerStack(() =>
        client.makeUnaryRequest(
          def.path,
          def.requestSerialize,
          def.responseDeserialize,
          toMessage(m.input, request),
          metadataOf(headers, opts),
          grpcCallOptions(opts),
          (err: ServiceError | null, value?: unknown) => {
            unhook();
            if (err !== null) reject(failureOf(err, opts, silent));
            else resolve(value);
          },
        ),
      );
      unhook = hook(call, opts, withinMs === undefined ? undefined : { probe, withinMs, onSilent: (e) => (silent = e) });
    });
  };
}

async function* readAll(stream: AsyncIterable<unknown>, opts: CallOptions | undefined, unhook: () => void): AsyncGenerator {
  try {
    for await (const msg of stream) yield msg;
  } catch (err) {
    throw failureOf(err, opts, undefined);
  } finally {
    unhook();
  }
}

/** A server stream bounded by its server's liveness (answerWithinMs): nothing is sent before the server answers. */
async function* boundedStream(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined, probe: LivenessProbe, request: unknown, opts: CallOptions, withinMs: number): AsyncGenerator {
  await whenPeerAnswers(probe.connection(), probe.address, opts, withinMs);
  const def = methodDefinition(m);
  const call = withoutCallerStack(() => client.makeServerStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, toMessage(m.input, request), metadataOf(headers, opts), grpcCallOptions(opts)));
  let silent: WardenError | undefined;
  const unhook = hook(call, opts, { probe, withinMs, onSilent: (e) => (silent = e) });
  try {
    for await (const msg of call) yield msg;
  } catch (err) {
    throw failureOf(err, opts, silent);
  } finally {
    unhook();
    // Leaving the loop early (break/return) cancels the RPC instead of leaking it; after the status it does nothing.
    call.cancel();
  }
}

function serverStreamCall(client: GrpcClient, m: DescMethod, headers: Readonly<Record<string, string>> | undefined, probe: LivenessProbe) {
  const def = methodDefinition(m);
  return (request: unknown, opts?: CallOptions): AsyncIterable<unknown> => {
    const withinMs = opts?.answerWithinMs;
    if (opts !== undefined && withinMs !== undefined) return boundedStream(client, m, headers, probe, request, opts, withinMs);
    const call = withoutCallerStack(() => client.makeServerStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, toMessage(m.input, request), metadataOf(headers, opts), grpcCallOptions(opts)));
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
    const call = withoutCallerStack(() => client.makeBidiStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, metadataOf(headers, opts), grpcCallOptions(opts)));
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
      const call = withoutCallerStack(() =>
        client.makeClientStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, metadataOf(headers, opts), grpcCallOptions(opts), (err: ServiceError | null, value?: unknown) => {
          unhook();
          if (err !== null) reject(fromGrpcError(err));
          else resolve(value);
        }),
      );
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
 * rejects with the signal's reason. Unary and server-streaming calls honour
 * `answerWithinMs` as the lean client does (through a liveness-only side
 * connection, see LivenessProbe); client and bidi streams ignore it.
 */
export function createClient<T extends DescService>(svc: T, address: string, options: CreateClientOptions = {}): Client<T> {
  // A stream's answers are read by the same decoder as a server's requests (decoder-release.ts).
  releaseDecodedSlices();
  const creds = options.credentials ?? (options.tls === undefined ? grpcCredentials.createInsecure() : channelCredentialsOf(options.tls));
  const client = new GrpcClient(address, creds, {
    "grpc.max_receive_message_length": options.maxReceiveMessageBytes ?? defaultMaxMessageBytes,
    "grpc.max_send_message_length": options.maxSendMessageBytes ?? defaultMaxMessageBytes,
    // Nothing reads channelz; on, every channel and subchannel keeps counters and a trace (memory per agent client).
    "grpc.enable_channelz": 0,
    ...(options.tls?.serverName === undefined ? {} : { "grpc.ssl_target_name_override": options.tls.serverName, "grpc.default_authority": options.tls.serverName }),
    ...options.channelOptions,
  });
  const probe = new LivenessProbe(address, options);
  const base = {
    close() {
      client.close();
      probe.close();
    },
  };
  return lazyMethods(svc, base, (m) => {
    switch (m.methodKind) {
      case "unary":
        return unaryCall(client, m, options.headers, probe);
      case "server_streaming":
        return serverStreamCall(client, m, options.headers, probe);
      case "bidi_streaming":
        return bidiCall(client, m, options.headers);
      case "client_streaming":
        return clientStreamCall(client, m, options.headers);
    }
  }) as Client<T>;
}
