import type { DescMessage } from "@bufbuild/protobuf";
import { decodeRequest } from "./request-decode.js";

/** A request the handler decodes when it is ready for it (EncodedRequest, or one already decoded in process). */
export interface RequestBytes<T> {
  /** The message; throws INVALID_ARGUMENT naming `request` when the bytes are not one (decodeRequest). */
  decode(): T;
}

/**
 * A request kept as its bytes until its handler decodes it, for a method
 * registered with `encodedRequests` (GrpcServer.add). A stream whose messages
 * may wait before they are handled — heartbeats held for their turn of the
 * event loop while thousands arrive at once — would otherwise hold each one
 * decoded while it waits: a few KiB of small objects per message on the heap,
 * which the young-generation collections copy while they wait and promote to
 * the old generation if they wait long enough. The bytes are one buffer off
 * the heap; decoded in their turn, the message lives only as long as its
 * handling. The element budget is checked when it is decoded, as for any
 * request (request-elements.ts).
 */
export class EncodedRequest<T> implements RequestBytes<T> {
  constructor(
    private readonly schema: DescMessage,
    readonly bytes: Uint8Array,
  ) {}

  decode(): T {
    return decodeRequest(this.schema, this.bytes) as T;
  }
}

/** A message already decoded (an in-process call, a test) as a RequestBytes. */
export function decodedRequest<T>(message: T): RequestBytes<T> {
  return { decode: () => message };
}
