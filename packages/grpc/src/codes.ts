import type { ServiceError, status } from "@grpc/grpc-js";
// The class from its own module: the lean client imports this file and must not load grpc-js's index (see h2-client-call.ts).
import { Metadata } from "@grpc/grpc-js/build/src/metadata.js";
import { Code, WardenError, isCode } from "@warden/common";

/** Trailer key carrying the JSON details of a WardenError across the wire. */
export const detailsTrailerKey = "warden-error-details";

/** What goes on the wire for an error: its code, the message callers may see, and its details as JSON (if any). */
export interface WireStatus {
  readonly code: Code;
  readonly message: string;
  readonly detailsJson: string | undefined;
}

/** The one place that decides what an error shows a remote caller (both servers use it). */
export function wireStatus(err: unknown): WireStatus {
  const e = WardenError.from(err, Code.Internal);
  let detailsJson: string | undefined;
  if (Object.keys(e.details).length > 0) {
    try {
      detailsJson = JSON.stringify(e.details);
    } catch {
      // details that cannot be serialised are dropped; the code and message still go
    }
  }
  // Unknown internal errors do not leak stack traces or internals to callers.
  const message = e.code === Code.Internal && !(err instanceof WardenError) ? "internal error" : e.rawMessage;
  return { code: e.code, message, detailsJson };
}

/** The details a peer sent in the `warden-error-details` trailer; {} when absent or unreadable. */
export function parseErrorDetails(raw: unknown): Record<string, unknown> {
  if (typeof raw !== "string") return {};
  try {
    return JSON.parse(raw) as Record<string, unknown>;
  } catch {
    return {};
  }
}

/** Maps a WardenError to the grpc-js error object a handler's callback takes. */
export function toGrpcStatus(err: unknown, trailers?: Metadata): Partial<ServiceError> & { code: status; details: string } {
  const w = wireStatus(err);
  const md = trailers ?? new Metadata();
  if (w.detailsJson !== undefined) md.set(detailsTrailerKey, w.detailsJson);
  // Code values are gRPC's status numbers by construction (see @warden/common errors.ts).
  // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment
  return { code: w.code, details: w.message, metadata: md };
}

/** Maps an error thrown by grpc-js on the client side to a WardenError. */
export function fromGrpcError(err: unknown): WardenError {
  if (err instanceof WardenError) return err;
  const se = err as Partial<ServiceError> | undefined;
  if (se !== undefined && typeof se === "object" && typeof se.code === "number") {
    const code = isCode(se.code) ? se.code : Code.Unknown;
    return new WardenError(code, se.details ?? se.message ?? "", { cause: err, details: parseErrorDetails(se.metadata?.get(detailsTrailerKey)[0]) });
  }
  return WardenError.from(err);
}
