import { readFileSync } from "node:fs";
import type * as Tls from "node:tls";
import { invalidArgument } from "@warden/common";
import type { ServerCertificateCheck } from "./server-node-check.js";

/**
 * Where a component's TLS identity lives. `caFile` set means mutual TLS:
 * servers require a client certificate signed by that CA, and clients verify
 * the server against it (instead of the system roots).
 */
export interface TlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile?: string | undefined;
}

/** A certificate chain, its private key and optionally the CA to verify peers against (PEM bytes). */
export interface TlsMaterial {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly ca?: Buffer | undefined;
}

/** What a client needs: the CA to verify the server against and, for mTLS, its own certificate. */
export interface ClientTls {
  readonly ca?: Buffer | undefined;
  readonly cert?: Buffer | undefined;
  readonly key?: Buffer | undefined;
  /** The name the server's certificate must carry; @default the host of the address dialled */
  readonly serverName?: string | undefined;
  /** Checked on every handshake after the CA and name checks (e.g. expectNodeCertificate): an Error refuses the connection. */
  readonly verify?: ServerCertificateCheck | undefined;
}

/** node:tls on first use: the CLI's plaintext admin commands never load it. */
const createSecureContext = (o: Tls.SecureContextOptions): Tls.SecureContext => process.getBuiltinModule("node:tls").createSecureContext(o);

/** Certificates, keys and CA bundles are small; a bigger file is a wrong path, not a PEM. */
export const maxPemFileBytes = 1024 * 1024;

function readPem(path: string, field: string): Buffer {
  let buf: Buffer;
  try {
    buf = readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw invalidArgument(field, `cannot read ${path}: ${code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : (err as Error).message}`);
  }
  if (buf.length > maxPemFileBytes) throw invalidArgument(field, `${path} is ${String(buf.length)} bytes; a PEM file is at most ${String(maxPemFileBytes)}`);
  if (!buf.includes("-----BEGIN ")) throw invalidArgument(field, `${path} is not a PEM file`);
  return buf;
}

/**
 * Reads and checks the files whole (the key matches the certificate, every
 * PEM parses) before anything uses them: a reload with a broken file is
 * refused and the running certificate stays. Synchronous: small files, read
 * at start and on SIGHUP. `field` prefixes error names (`tls.cert`).
 */
export function readTlsMaterial(files: TlsFiles, field = "tls"): TlsMaterial {
  const cert = readPem(files.certFile, `${field}.cert`);
  const key = readPem(files.keyFile, `${field}.key`);
  const ca = files.caFile === undefined ? undefined : readPem(files.caFile, `${field}.ca`);
  try {
    createSecureContext({ cert, key, ...(ca === undefined ? {} : { ca }) });
  } catch (err) {
    throw invalidArgument(field, `${files.certFile} / ${files.keyFile}${files.caFile === undefined ? "" : ` / ${files.caFile}`}: ${(err as Error).message}`);
  }
  return { cert, key, ca };
}

/** A CA bundle to verify peers against (PEM, checked to parse). */
export function readCaBundle(path: string, field: string): Buffer {
  const ca = readPem(path, field);
  try {
    createSecureContext({ ca });
  } catch (err) {
    throw invalidArgument(field, `${path}: ${(err as Error).message}`);
  }
  return ca;
}

/** A client's TLS from a component's own material: its certificate for mTLS, its CA to verify the server. */
export function clientTlsOf(m: TlsMaterial, serverName?: string): ClientTls {
  return { ca: m.ca, ...(m.ca === undefined ? {} : { cert: m.cert, key: m.key }), ...(serverName === undefined ? {} : { serverName }) };
}
