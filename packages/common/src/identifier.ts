import { Code, WardenError, invalidArgument } from "./errors.js";

/**
 * The one syntax of every identifier that crosses a boundary: model ids, node
 * ids, incarnations, catalog backend names, agent label keys. 1..128 of
 * [A-Za-z0-9._:-], not starting with "-" (so an id can never be read as an
 * option by a program it is handed to). No "/", so an id is never a path.
 */
export const identifierPattern = /^[A-Za-z0-9._:][A-Za-z0-9._:-]{0,127}$/;

/** The rule in words, for error messages and docs. */
export const identifierRule = '1..128 characters of [A-Za-z0-9._:-], not starting with "-"';

/** The longest identifier. */
export const maxIdentifierChars = 128;

export function isIdentifier(value: string): boolean {
  return identifierPattern.test(value);
}

/** A short, printable echo of a peer's value: JSON-escaped (NUL, control and RTL characters show as escapes), at most 64 characters. */
export function echoValue(value: string): string {
  return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value).replace(/[\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Returns `value`, or throws INVALID_ARGUMENT naming `field`. */
export function checkIdentifier(field: string, value: string): string {
  if (!identifierPattern.test(value)) throw invalidArgument(field, value === "" ? "is required" : `${echoValue(value)} is not a valid id (${identifierRule})`);
  return value;
}

/**
 * A cap on something a caller can make the server hold (streams, waiters,
 * nodes, entries in one report): RESOURCE_EXHAUSTED naming the field or cap,
 * so a client tells "too many" from "malformed".
 */
export function capExceeded(field: string, problem: string): WardenError {
  return new WardenError(Code.ResourceExhausted, `${field}: ${problem}`, { details: { field } });
}
