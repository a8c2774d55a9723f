import type { PeerCertificate } from "node:tls";
import type { HandlerContext } from "./types.js";

/**
 * The verified identity of a TLS client (mutual TLS): what its certificate
 * names. Only certificates the server's CA verified get this far (the
 * handshake refuses the rest).
 */
export interface PeerIdentity {
  /** The subject's CN ("" when none). */
  readonly commonName: string;
  readonly dnsNames: readonly string[];
  readonly ipAddresses: readonly string[];
  readonly uris: readonly string[];
  /**
   * The Warden node id the certificate is issued to: its `urn:warden:node:<id>`
   * URI SAN (`warden certs issue agent`), undefined for a certificate naming
   * no node (a coordinator's, an operator's).
   */
  readonly nodeId: string | undefined;
  /**
   * The certificate carries the coordinator's identity, the URI SAN
   * `urn:warden:coordinator` (`warden certs issue coordinator`), and names no
   * node: the only caller an agent takes commands from.
   */
  readonly isCoordinator: boolean;
}

/** The URI SAN prefix that binds a certificate to a node id. */
export const nodeIdUriPrefix = "urn:warden:node:";

/** The URI SAN that marks the coordinator's certificate. */
export const coordinatorUri = "urn:warden:coordinator";

/**
 * Where a server's HandlerContext keeps how to read its peer's certificate:
 * a symbol, so the context's public shape stays as it is and only this
 * accessor reads it.
 */
export const peerCertificateOf: unique symbol = Symbol("warden.peerCertificate");

/** A context that can say its peer's certificate (servers set this; the in-process client does not). */
export interface PeerCertificateSource {
  [peerCertificateOf]?: () => PeerCertificate | undefined;
}

/** The identity a certificate names (subject CN and subjectAltName entries). */
export function identityOfCertificate(cert: PeerCertificate): PeerIdentity {
  const dnsNames: string[] = [];
  const ipAddresses: string[] = [];
  const uris: string[] = [];
  // Node renders SANs as "DNS:a, IP Address:1.2.3.4, URI:urn:…" (quoting values that hold a comma).
  for (const part of (cert.subjectaltname ?? "").split(/, (?=[A-Za-z ]+:)/)) {
    const colon = part.indexOf(":");
    if (colon < 0) continue;
    const kind = part.slice(0, colon);
    const value = part.slice(colon + 1).replace(/^"(.*)"$/, "$1");
    if (kind === "DNS") dnsNames.push(value);
    else if (kind === "IP Address") ipAddresses.push(value);
    else if (kind === "URI") uris.push(value);
  }
  const cn = (cert.subject as Partial<Record<string, string | string[]>> | undefined)?.CN;
  const node = uris.filter((u) => u.startsWith(nodeIdUriPrefix)).map((u) => u.slice(nodeIdUriPrefix.length));
  // Two node ids in one certificate name no node: refusing is safer than picking one.
  // A certificate naming a node as well as the coordinator is neither's coordinator.
  const isCoordinator = uris.includes(coordinatorUri) && node.length === 0;
  return { commonName: Array.isArray(cn) ? (cn[0] ?? "") : (cn ?? ""), dnsNames, ipAddresses, uris, nodeId: node.length === 1 ? node[0] : undefined, isCoordinator };
}

/**
 * The verified client certificate's identity of the call `ctx` serves, or
 * undefined when the call came without one: plaintext, TLS without mutual
 * authentication, or an in-process call.
 */
export function peerIdentity(ctx: HandlerContext): PeerIdentity | undefined {
  const read = (ctx as HandlerContext & PeerCertificateSource)[peerCertificateOf];
  const cert = read?.();
  if (cert?.raw === undefined) return undefined;
  return identityOfCertificate(cert);
}
