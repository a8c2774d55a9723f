/**
 * One error type for all of Warden, with gRPC-aligned codes. The numeric values
 * are gRPC's status numbers, so the gRPC edge maps them one to one.
 */
export const Code = {
  /** Not an error; never thrown. */
  Ok: 0,
  /** The operation was cancelled, typically by the caller. */
  Canceled: 1,
  /** Unknown error, e.g. an error from another address space with no code. */
  Unknown: 2,
  /** The caller sent a malformed value; the message names the field. */
  InvalidArgument: 3,
  /** A deadline expired before the operation completed. */
  DeadlineExceeded: 4,
  /** A named entity (model, node, instance) does not exist. */
  NotFound: 5,
  /** The entity the caller tried to create already exists. */
  AlreadyExists: 6,
  /** The caller lacks permission. */
  PermissionDenied: 7,
  /** A resource is exhausted (capacity, queue, message size). */
  ResourceExhausted: 8,
  /** The system is not in a state the operation requires. */
  FailedPrecondition: 9,
  /** The operation was aborted (e.g. a concurrency conflict). */
  Aborted: 10,
  /** A value is outside the valid range. */
  OutOfRange: 11,
  /** The operation is not implemented or supported. */
  Unimplemented: 12,
  /** An invariant was broken: a bug. */
  Internal: 13,
  /** The service is unavailable; retrying may help. */
  Unavailable: 14,
  /** Unrecoverable data loss. */
  DataLoss: 15,
  /** The caller is not authenticated. */
  Unauthenticated: 16,
} as const;

export type Code = (typeof Code)[keyof typeof Code];

const codeNames = new Map<number, string>(
  Object.entries(Code).map(([k, v]) => [v, k.replace(/[A-Z]/g, (c, i: number) => (i === 0 ? c : "_" + c)).toLowerCase()]),
);

/** Lower snake-case name of a code, e.g. `failed_precondition`. */
export function codeName(code: Code): string {
  return codeNames.get(code) ?? "unknown";
}

/** True for numbers that are valid codes. */
export function isCode(value: number): value is Code {
  return codeNames.has(value);
}

export interface WardenErrorOptions {
  cause?: unknown;
  /** Structured details for callers that branch on more than the code. */
  details?: Readonly<Record<string, unknown>>;
}

/** Marks every WardenError, whichever copy of this module made it (a registered symbol is one per process). */
const wardenErrorBrand = Symbol.for("@warden/common.WardenError");

/**
 * The one error class. `message` is prefixed with the code name
 * (`[invalid_argument] …`); `rawMessage` is the text without it.
 */
export class WardenError extends Error {
  override readonly name: string = "WardenError";
  readonly code: Code;
  readonly rawMessage: string;
  readonly details: Readonly<Record<string, unknown>>;

  /**
   * `instanceof` checks the brand, not the prototype: the built CLI carries two
   * copies of this module (its CommonJS front and the ES-module runners it
   * imports), and an error from one copy must still be a WardenError to the
   * other — else `warden up --config nope.yaml` printed `[unknown]
   * [invalid_argument] …` and exited 1 instead of 2.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === "object" && value !== null && (value as { [wardenErrorBrand]?: unknown })[wardenErrorBrand] === true;
  }

  constructor(code: Code, message: string, options: WardenErrorOptions = {}) {
    super(`[${codeName(code)}] ${message}`, options.cause === undefined ? undefined : { cause: options.cause });
    Object.defineProperty(this, wardenErrorBrand, { value: true });
    this.code = code;
    this.rawMessage = message;
    this.details = options.details ?? {};
  }

  /**
   * Normalises anything caught into a WardenError: a WardenError passes through,
   * an AbortError becomes Canceled (or the abort reason if it is a WardenError),
   * everything else becomes `fallback` (Unknown by default) with the cause kept.
   */
  static from(err: unknown, fallback: Code = Code.Unknown): WardenError {
    if (err instanceof WardenError) return err;
    if (err instanceof Error && (err.name === "AbortError" || err.name === "TimeoutError")) {
      const reason: unknown = (err as Error & { cause?: unknown }).cause;
      if (reason instanceof WardenError) return reason;
      return new WardenError(err.name === "TimeoutError" ? Code.DeadlineExceeded : Code.Canceled, err.message, { cause: err });
    }
    if (err instanceof Error) return new WardenError(fallback, err.message, { cause: err });
    return new WardenError(fallback, String(err), { cause: err });
  }
}

/** True when `err` is a WardenError, optionally with the given code. */
export function isWardenError(err: unknown, code?: Code): err is WardenError {
  return err instanceof WardenError && (code === undefined || err.code === code);
}

/** Shorthand for an INVALID_ARGUMENT error that names the offending field. */
export function invalidArgument(field: string, problem: string): WardenError {
  return new WardenError(Code.InvalidArgument, `${field}: ${problem}`, { details: { field } });
}

/** Shorthand for a PERMISSION_DENIED error that names the field the caller may not set to this value. */
export function permissionDenied(field: string, problem: string): WardenError {
  return new WardenError(Code.PermissionDenied, `${field}: ${problem}`, { details: { field } });
}
