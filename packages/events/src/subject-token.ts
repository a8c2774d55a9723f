import { invalidArgument } from "@warden/common";

/**
 * Token escaping for NATS subjects (DESIGN §4): a node id or model id becomes
 * exactly one subject token that can never act as a wildcard or split a token.
 *
 * - `.` → `_2E` and `_` → `_5F` (the documented cases), and likewise `*`, `>`,
 *   and every byte outside printable ASCII (space, tabs, control characters,
 *   DEL and the UTF-8 bytes of non-ASCII characters) → `_XX` (upper-case hex).
 * - The empty string → `_` alone (NATS forbids empty tokens). Escaping never
 *   produces a lone `_` otherwise, since every `_` it writes is followed by two
 *   hex digits, so the mapping stays reversible.
 *
 * Strings with unpaired UTF-16 surrogates cannot be represented in UTF-8
 * (nor in protobuf strings); they are encoded with U+FFFD like TextEncoder does.
 */
export function escapeSubjectToken(value: string): string {
  if (value === "") return "_";
  let out = "";
  let plain = true;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x21 || c > 0x7e || c === 0x2e || c === 0x5f || c === 0x2a || c === 0x3e) {
      plain = false;
      break;
    }
  }
  // Fast path: most ids (`llama-8b`, `gpu-node-1`) need no escaping.
  if (plain) return value;
  for (const byte of encoder.encode(value)) {
    if (byte < 0x21 || byte > 0x7e || byte === 0x2e || byte === 0x5f || byte === 0x2a || byte === 0x3e) {
      out += "_" + hex.charAt(byte >> 4) + hex.charAt(byte & 0x0f);
    } else {
      out += String.fromCharCode(byte);
    }
  }
  return out;
}

/** Inverse of {@link escapeSubjectToken}. A malformed token (bad escape, invalid UTF-8) is INVALID_ARGUMENT. */
export function unescapeSubjectToken(token: string): string {
  if (token === "_") return "";
  if (!token.includes("_")) {
    if (!/^[\x21-\x7e]+$/.test(token) || /[.*>]/.test(token)) throw invalidArgument("token", `not an escaped subject token: "${token}"`);
    return token;
  }
  const bytes: number[] = [];
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c === 0x5f) {
      const pair = token.slice(i + 1, i + 3);
      if (!/^[0-9A-F]{2}$/.test(pair)) throw invalidArgument("token", `bad escape at offset ${i} in "${token}"`);
      bytes.push(parseInt(pair, 16));
      i += 2;
    } else if (c < 0x21 || c > 0x7e || c === 0x2e || c === 0x2a || c === 0x3e) {
      throw invalidArgument("token", `unescaped character at offset ${i} in "${token}"`);
    } else {
      bytes.push(c);
    }
  }
  try {
    return strictDecoder.decode(new Uint8Array(bytes));
  } catch (err) {
    throw invalidArgument("token", `escaped bytes are not UTF-8 in "${token}": ${String(err)}`);
  }
}

const hex = "0123456789ABCDEF";
const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
