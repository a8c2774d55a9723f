import type { status} from "@grpc/grpc-js";
import { Metadata, type ServiceError } from "@grpc/grpc-js";
import { Code, WardenError, isCode } from "@warden/common";

/** Trailer key carrying the JSON details of a WardenError across the wire. */
export const detailsTrailerKey = "warden-error-details";

/** Maps a WardenError to the grpc-js error object a handler's callback takes. */
export function toGrpcStatus(err: unknown, trailers?: Metadata): Partial<ServiceError> & { code: status; details: string } {
  const e = WardenError.from(err, Code.Internal);
  const md = trailers ?? new Metadata();
  if (Object.keys(e.details).length > 0) {
    try {
      md.set(detailsTrailerKey, JSON.stringify(e.details));
    } catch {
      // details that cannot be serialised are dropped; the code and message still go
    }
  }
  // Unknown internal errors do not leak stack traces or internals to callers.
  const details = e.code === Code.Internal && !(err instanceof WardenError) ? "internal error" : e.rawMessage;
  // Code values are gRPC's status numbers by construction (see @warden/common errors.ts).
  // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment
  return { code: e.code, details, metadata: md };
}

/** Maps an error thrown by grpc-js on the client side to a WardenError. */
export function fromGrpcError(err: unknown): WardenError {
  if (err instanceof WardenError) return err;
  const se = err as Partial<ServiceError> | undefined;
  if (se !== undefined && typeof se === "object" && typeof se.code === "number") {
    const code = isCode(se.code) ? se.code : Code.Unknown;
    let details: Record<string, unknown> = {};
    const raw = se.metadata?.get(detailsTrailerKey)[0];
    if (typeof raw === "string") {
      try {
        details = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        details = {};
      }
    }
    return new WardenError(code, se.details ?? se.message ?? "", { cause: err, details });
  }
  return WardenError.from(err);
}
