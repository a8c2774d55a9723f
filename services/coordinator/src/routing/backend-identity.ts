import { ScalarType, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Backend } from "@warden/proto";
import { undecodableRequest } from "@warden/grpc";

/**
 * Where each `backend.Backend` request carries the model identity, read from
 * the generated descriptors (never hand-typed): the field named
 * `ModelIdentity`, a singular string, whose number differs per message
 * (PredictOptions 54, RerankRequest 4, ScoreRequest 5, TTSRequest 8, …).
 * `undefined` for requests without one (HealthMessage, ModelOptions, the
 * streaming-request messages, job and store requests).
 */
export function identityFieldOf(message: DescMessage): number | undefined {
  const f = message.fields.find((x) => x.name === "ModelIdentity");
  if (f === undefined || f.fieldKind !== "scalar" || f.scalar !== ScalarType.STRING) return undefined;
  return f.number;
}

/** One row per method of the service: its path and its request's identity field. */
export interface BackendMethodRow {
  readonly method: DescMethod;
  readonly identityField: number | undefined;
}

/** The table for every method of `backend.Backend`, built once at load. */
export const backendMethodTable: ReadonlyMap<string, BackendMethodRow> = new Map(
  Backend.methods.map((m) => [m.name, { method: m, identityField: identityFieldOf(m.input) }]),
);

/**
 * Reads the identity a request names, walking its fields without decoding
 * them (the last occurrence wins, as protobuf says for a singular field);
 * "" when absent. Bytes that are not wire format, or an identity that is not
 * UTF-8, are INVALID_ARGUMENT naming the message.
 */
export function readIdentity(bytes: Uint8Array, field: number, message: DescMessage): string {
  const r = new BinaryReader(bytes);
  let identity = "";
  try {
    while (r.pos < r.len) {
      const [f, wire] = r.tag();
      if (f === field && wire === WireType.LengthDelimited) identity = r.string(true);
      else r.skip(wire, f);
    }
  } catch (err) {
    throw undecodableRequest(message.typeName, err);
  }
  return identity;
}

/** The request's bytes with `identity` appended at `field`: it overrides any value the caller sent. */
export function withIdentity(bytes: Uint8Array, field: number, identity: string): Uint8Array {
  const tail = new BinaryWriter().tag(field, WireType.LengthDelimited).string(identity).finish();
  const out = new Uint8Array(bytes.length + tail.length);
  out.set(bytes, 0);
  out.set(tail, bytes.length);
  return out;
}
