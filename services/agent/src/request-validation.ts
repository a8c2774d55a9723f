import { checkIdentifier, invalidArgument, isUlid } from "@warden/common";

/** Model and backend ids: the shared identifier syntax (no leading "-": never an option to a backend's argv). */
export function checkId(field: string, value: string): string {
  return checkIdentifier(field, value);
}

/** Incarnations are coordinator-minted ULIDs; anything else is rejected. */
export function checkIncarnation(field: string, value: string): string {
  if (!isUlid(value)) throw invalidArgument(field, `must be a ULID (26 Crockford base32 characters), got ${JSON.stringify(value.slice(0, 64))}`);
  return value;
}

/** host:port with a numeric port. */
export function checkAddress(field: string, value: string): string {
  const m = /^([A-Za-z0-9.\-[\]:]{1,253}):(\d{1,5})$/.exec(value);
  if (m === null || Number(m[2]) > 65535) throw invalidArgument(field, `must be host:port, got ${JSON.stringify(value.slice(0, 64))}`);
  return value;
}

/** Options are `key:value` strings passed as ModelOptions.Options: capped in count and size, no control characters. */
export function checkOptions(field: string, options: readonly string[]): readonly string[] {
  if (options.length > 256) throw invalidArgument(field, `at most 256 options, got ${String(options.length)}`);
  options.forEach((o, i) => {
    // eslint-disable-next-line no-control-regex
    if (o.length > 4096 || /[\u0000-\u001f\u007f]/.test(o)) throw invalidArgument(`${field}[${String(i)}]`, "must be at most 4096 characters without control characters");
  });
  return options;
}

/** Free text that goes into records (reasons, file names): capped, no control characters. */
export function checkText(field: string, value: string, maxChars: number): string {
  // eslint-disable-next-line no-control-regex
  if (value.length > maxChars || /[\u0000-\u001f\u007f]/.test(value)) throw invalidArgument(field, `must be at most ${String(maxChars)} characters without control characters`);
  return value;
}
