import { invalidArgument } from "@warden/common";
import { parseTlsFiles, type TlsFiles } from "@warden/grpc";

/**
 * TLS to the backends that serve it: which ones (by catalog name, or every
 * backend of a node) and how to verify them. Backends elsewhere stay
 * plaintext (a LocalAI backend on the agent's loopback serves none).
 */
export interface BackendTlsConfig {
  /** The CA backends' certificates are verified against. */
  readonly caFile: string;
  /** A client certificate for backends that require mutual TLS. */
  readonly certFile: string | undefined;
  readonly keyFile: string | undefined;
  /** The name backends' certificates carry, when not the host dialled. */
  readonly serverName: string | undefined;
  /** Catalog backend names (a model's `backend`) that serve TLS. */
  readonly backends: readonly string[];
  /** Node ids all of whose backends serve TLS. */
  readonly nodes: readonly string[];
}

/** The coordinator's transport settings. */
export interface TlsSettings {
  /** Certificate, key and (mutual TLS with agents) CA; undefined = plaintext. */
  readonly tls: TlsFiles | undefined;
  /** Allow plaintext on a non-loopback listen address. @default false */
  readonly insecure: boolean;
  readonly backendTls: BackendTlsConfig | undefined;
}

export const tlsSettingsFields = ["tls", "insecure", "backendTls"] as const;

/** At most this many entries in backendTls.backends and backendTls.nodes each. */
export const maxBackendTlsEntries = 1024;

function names(v: unknown, field: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string" || x === "" || x.length > 128)) throw invalidArgument(field, "must be a list of names (1..128 characters)");
  if (v.length > maxBackendTlsEntries) throw invalidArgument(field, `at most ${String(maxBackendTlsEntries)} entries, got ${String(v.length)}`);
  return v as string[];
}

function optPath(v: unknown, field: string): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v === "" || v.length > 4096) throw invalidArgument(field, "must be a file path");
  return v;
}

/** Reads `tls`, `insecure` and `backendTls` from a validated-to-be-a-map config. */
export function parseTlsSettings(input: Readonly<Record<string, unknown>>): TlsSettings {
  const insecure = input["insecure"] ?? false;
  if (typeof insecure !== "boolean") throw invalidArgument("insecure", `must be true or false, got ${JSON.stringify(insecure)}`);
  const b = input["backendTls"];
  let backendTls: BackendTlsConfig | undefined;
  if (b !== undefined) {
    if (typeof b !== "object" || b === null || Array.isArray(b)) throw invalidArgument("backendTls", "must be a map");
    const r = b as Record<string, unknown>;
    for (const k of Object.keys(r)) if (!["ca", "cert", "key", "serverName", "backends", "nodes"].includes(k)) throw invalidArgument(`backendTls.${k}`, "unknown field (allowed: ca, cert, key, serverName, backends, nodes)");
    const caFile = optPath(r["ca"], "backendTls.ca");
    if (caFile === undefined) throw invalidArgument("backendTls.ca", "required: the CA that signed the backends' certificates");
    const certFile = optPath(r["cert"], "backendTls.cert");
    const keyFile = optPath(r["key"], "backendTls.key");
    if ((certFile === undefined) !== (keyFile === undefined)) throw invalidArgument(certFile === undefined ? "backendTls.cert" : "backendTls.key", "cert and key go together");
    const serverName = r["serverName"];
    if (serverName !== undefined && (typeof serverName !== "string" || serverName === "" || serverName.length > 253)) throw invalidArgument("backendTls.serverName", "must be a host name");
    backendTls = { caFile, certFile, keyFile, serverName: serverName, backends: names(r["backends"], "backendTls.backends"), nodes: names(r["nodes"], "backendTls.nodes") };
  }
  return { tls: parseTlsFiles(input["tls"], "tls"), insecure, backendTls };
}
