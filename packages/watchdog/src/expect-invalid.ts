import { Code, isWardenError, type WardenError } from "@warden/common";
import { expect } from "vitest";

/** The value `fn` throws, or undefined when it returns. */
export function errorOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
}

/** Asserts `fn` throws INVALID_ARGUMENT naming `field`. */
export function expectInvalid(fn: () => unknown, field: string): void {
  const e = errorOf(fn);
  expect(isWardenError(e, Code.InvalidArgument), String(e)).toBe(true);
  expect((e as WardenError).details.field).toBe(field);
}
