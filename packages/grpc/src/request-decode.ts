import { fromBinary, type DescMessage } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import { checkRequestElements } from "./request-elements.js";

/**
 * The error for request bytes that are not a `typeName` message: the
 * caller's fault, so INVALID_ARGUMENT (field `request`), on every server and
 * method kind alike.
 */
export function undecodableRequest(typeName: string, cause: unknown): WardenError {
  return new WardenError(Code.InvalidArgument, `request: is not a valid ${typeName}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause, details: { field: "request" } });
}

/** Decodes a request; throws `undecodableRequest` when the bytes are not a `schema` message. */
export function decodeRequest(schema: DescMessage, bytes: Uint8Array): unknown {
  checkRequestElements(schema, bytes);
  try {
    return fromBinary(schema, bytes);
  } catch (e) {
    throw undecodableRequest(schema.typeName, e);
  }
}

/**
 * What grpc-js hands the handler wrapper for a request that did not decode.
 * grpc-js answers a throwing `requestDeserialize` with INTERNAL ("Error
 * deserializing request") and ignores the error's code, so the deserializer
 * returns this instead and the wrapper answers with its error.
 */
export class UndecodableRequest {
  constructor(readonly error: WardenError) {}
}

/** A grpc-js `requestDeserialize` that never throws (see UndecodableRequest). */
export function lenientRequestDeserializer(schema: DescMessage): (bytes: Buffer) => unknown {
  return (bytes) => {
    try {
      checkRequestElements(schema, bytes);
    } catch (e) {
      return new UndecodableRequest(WardenError.from(e));
    }
    try {
      return fromBinary(schema, bytes);
    } catch (e) {
      return new UndecodableRequest(undecodableRequest(schema.typeName, e));
    }
  };
}
