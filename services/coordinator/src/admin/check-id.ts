import { checkIdentifier, identifierPattern } from "@warden/common";

/** Node ids, model ids and incarnations in the Admin API: the shared identifier syntax (@warden/common identifier.ts). */
export const idPattern = identifierPattern;

/** Returns `value` or throws INVALID_ARGUMENT naming `field` (the value is echoed at most 64 characters long). */
export function checkId(value: string, field: string): string {
  return checkIdentifier(field, value);
}
