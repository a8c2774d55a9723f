import { readFileSync } from "node:fs";
import { invalidArgument } from "./errors.js";

/** Longest secret read from a file (a token, not a document). */
export const maxSecretChars = 1024;

/**
 * Reads a secret (a bearer token) from a file: the whole file, surrounding
 * whitespace trimmed; 1..1024 printable ASCII characters without spaces.
 * Errors name `field` and the path, never the content.
 */
export function readSecretFile(path: string, field: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw invalidArgument(field, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
  const secret = text.trim();
  if (secret === "" || secret.length > maxSecretChars || !/^[\x21-\x7e]+$/.test(secret)) {
    throw invalidArgument(field, `${path} must hold one token: 1..${String(maxSecretChars)} printable characters without spaces`);
  }
  return secret;
}
