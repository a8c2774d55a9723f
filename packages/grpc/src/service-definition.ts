import type { ServiceDefinition, MethodDefinition } from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { lenientRequestDeserializer } from "./request-decode.js";
import { EncodedRequest } from "./encoded-request.js";
import { encodingOf } from "./encoded-once.js";

function serializer(schema: DescMessage) {
  // create() returns an existing message unchanged, so handlers may return init objects.
  return (value: unknown): Buffer => {
    // A message made by encodedOnce is sent as the bytes made with it (grpc-js copies them into its frame).
    const once = encodingOf(value);
    if (once !== undefined) return once;
    const bytes = toBinary(schema, create(schema, value as Record<string, unknown>));
    // toBinary's result is a fresh array of exactly the message (its writer's slice): a Buffer over
    // it, not a copy of it (a peer upload's chunks are hundreds of KiB, every copy counts).
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

function deserializer(schema: DescMessage) {
  return (bytes: Buffer): object => fromBinary(schema, bytes);
}

const paths = new WeakMap<DescMethod, string>();
const definitions = new WeakMap<DescMethod, MethodDefinition<unknown, object>>();

/** The grpc-js path of a method, e.g. `/warden.v1.AgentService/StopBackend` (one string per method, kept: clients and the proxy hop ask per call). */
export function methodPath(method: DescMethod): string {
  let path = paths.get(method);
  if (path === undefined) {
    path = `/${method.parent.typeName}/${method.name}`;
    paths.set(method, path);
  }
  return path;
}

/** The grpc-js MethodDefinition for one protobuf-es method: made once per method and shared (nothing mutates it), not once per client. */
export function methodDefinition(method: DescMethod): MethodDefinition<unknown, object> {
  let def = definitions.get(method);
  if (def === undefined) {
    def = newMethodDefinition(method);
    definitions.set(method, def);
  }
  return def;
}

function newMethodDefinition(method: DescMethod): MethodDefinition<unknown, object> {
  return {
    path: methodPath(method),
    requestStream: method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming",
    responseStream: method.methodKind === "server_streaming" || method.methodKind === "bidi_streaming",
    requestSerialize: serializer(method.input),
    requestDeserialize: deserializer(method.input),
    responseSerialize: serializer(method.output),
    responseDeserialize: deserializer(method.output),
    originalName: method.localName,
  };
}

/** Builds a grpc-js ServiceDefinition from a protobuf-es service, keyed by method localName. */
export function grpcServiceDefinition(svc: DescService): ServiceDefinition {
  const def: Record<string, MethodDefinition<unknown, object>> = {};
  for (const m of svc.methods) def[m.localName] = methodDefinition(m);
  return def;
}

/**
 * The ServiceDefinition GrpcServer registers: as `grpcServiceDefinition`, but
 * a request that does not decode reaches the handler wrapper as an
 * `UndecodableRequest`, answered INVALID_ARGUMENT rather than grpc-js's INTERNAL;
 * the requests of the methods named in `encoded` (by localName) reach their
 * handler as EncodedRequests, decoded by the handler.
 */
export function grpcServerDefinition(svc: DescService, encoded: ReadonlySet<string> = new Set()): ServiceDefinition {
  const def: Record<string, MethodDefinition<unknown, object>> = {};
  for (const m of svc.methods) {
    const input = m.input;
    const requestDeserialize = encoded.has(m.localName) ? (bytes: Buffer): object => new EncodedRequest(input, bytes) : lenientRequestDeserializer(input);
    def[m.localName] = { ...methodDefinition(m), requestDeserialize };
  }
  return def;
}
