import { invalidArgument } from "@warden/common";
import type { TlsFiles } from "./tls-material.js";

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A file path field: non-empty, at most 4096 characters (PATH_MAX), no NUL. */
function path(v: unknown, field: string): string {
  if (typeof v !== "string" || v === "" || v.length > 4096 || v.includes("\0")) throw invalidArgument(field, `must be a file path (1..4096 characters), got ${v === undefined ? "nothing" : JSON.stringify(v)}`);
  return v;
}

/**
 * A config's `tls` block: `{ cert, key, ca? }`, file paths (relative to the
 * working directory). cert and key go together; `ca` turns on mutual TLS.
 * Undefined when the block is absent (plaintext).
 */
export function parseTlsFiles(v: unknown, field = "tls"): TlsFiles | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with cert, key and optionally ca");
  for (const k of Object.keys(v)) if (k !== "cert" && k !== "key" && k !== "ca") throw invalidArgument(`${field}.${k}`, "unknown field (allowed: cert, key, ca)");
  if (v["cert"] === undefined || v["key"] === undefined) throw invalidArgument(v["cert"] === undefined ? `${field}.cert` : `${field}.key`, "cert and key are both required (the certificate chain and its private key, PEM)");
  return { certFile: path(v["cert"], `${field}.cert`), keyFile: path(v["key"], `${field}.key`), ...(v["ca"] === undefined ? {} : { caFile: path(v["ca"], `${field}.ca`) }) };
}
