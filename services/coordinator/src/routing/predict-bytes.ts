import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { undecodableRequest } from "@warden/grpc";

/**
 * Pass-through encoding of Predict for the data-plane listener: the
 * coordinator reads only `PredictRequest.model` and forwards the
 * `PredictOptions` bytes as they came, with `ModelIdentity` appended (for a
 * singular field the last occurrence wins, per the protobuf spec, so the
 * caller cannot override it); the backend's `Reply` bytes go back wrapped in
 * `PredictResponse` without being decoded. Field numbers: proto/warden/v1/
 * inference.proto and proto/backend/backend.proto.
 */
const requestModelField = 1;
const requestOptionsField = 2;
const modelIdentityField = 54;
const responseReplyField = 1;
const responseNodeIdField = 2;

export interface PredictRequestBytes {
  readonly model: string;
  /** The `PredictOptions` bytes with `ModelIdentity` appended (the model's backend-facing name, model-identity.ts). */
  readonly backendRequest: Uint8Array;
}

/** Walks a message's fields without decoding them: throws when the bytes are not protobuf wire format. */
function checkWireFormat(bytes: Uint8Array): void {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    r.skip(wire, field);
  }
}

/**
 * Reads `model`, keeps the options bytes (several occurrences merge, as
 * protobuf merges them). Bytes that are not a PredictRequest — truncated,
 * not wire format (the options too: their fields are walked, not decoded),
 * or a model that is not UTF-8 — are INVALID_ARGUMENT, as on the main port.
 * Whether each options field has its declared type is the backend's to check.
 */
export function splitPredictRequest(bytes: Uint8Array, identityOf: (model: string) => string = (m) => m): PredictRequestBytes {
  const r = new BinaryReader(bytes);
  let model = "";
  const options: Uint8Array[] = [];
  try {
    while (r.pos < r.len) {
      const [field, wire] = r.tag();
      if (field === requestModelField && wire === WireType.LengthDelimited) model = r.string(true);
      else if (field === requestOptionsField && wire === WireType.LengthDelimited) {
        const o = r.bytes();
        checkWireFormat(o);
        options.push(o);
      } else r.skip(wire, field);
    }
  } catch (err) {
    throw undecodableRequest("warden.v1.PredictRequest", err);
  }
  const identity = new BinaryWriter().tag(modelIdentityField, WireType.LengthDelimited).string(identityOf(model)).finish();
  let size = identity.length;
  for (const o of options) size += o.length;
  const backendRequest = new Uint8Array(size);
  let at = 0;
  for (const o of options) {
    backendRequest.set(o, at);
    at += o.length;
  }
  backendRequest.set(identity, at);
  return { model, backendRequest };
}

/** `PredictResponse { reply = <the backend's Reply bytes>, node_id }`. */
export function predictResponseBytes(reply: Uint8Array, nodeId: string): Uint8Array {
  return new BinaryWriter().tag(responseReplyField, WireType.LengthDelimited).bytes(reply).tag(responseNodeIdField, WireType.LengthDelimited).string(nodeId).finish();
}
