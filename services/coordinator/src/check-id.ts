import { invalidArgument } from "@warden/common";

/** Node ids, model ids and incarnations in the Admin API (the config's model ids follow the same rule). */
export const idPattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** Returns `value` or throws INVALID_ARGUMENT naming `field` (the value is echoed at most 64 characters long). */
export function checkId(value: string, field: string): string {
  if (!idPattern.test(value)) throw invalidArgument(field, value === "" ? "is required" : `"${value.slice(0, 64)}" is not a valid id (${idPattern.source})`);
  return value;
}
