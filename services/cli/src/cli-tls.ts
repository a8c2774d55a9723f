import { readCaBundle, readTlsMaterial, type H2ClientOptions } from "@warden/grpc";
import { invalidArgument } from "@warden/common";
import type { GlobalOpts } from "./action-context.js";

/**
 * The admin commands' TLS from --tls-ca / --tls-cert / --tls-key (or
 * WARDEN_TLS_CA, WARDEN_TLS_CERT, WARDEN_TLS_KEY): any of them means TLS;
 * a certificate means mutual TLS. None: plaintext (a loopback Warden).
 */
export function cliTransport(g: GlobalOpts): H2ClientOptions {
  if (g.tlsCa === undefined && g.tlsCert === undefined && g.tlsKey === undefined) return {};
  if ((g.tlsCert === undefined) !== (g.tlsKey === undefined)) throw invalidArgument(g.tlsCert === undefined ? "--tls-cert" : "--tls-key", "--tls-cert and --tls-key go together");
  const own = g.tlsCert === undefined || g.tlsKey === undefined ? undefined : readTlsMaterial({ certFile: g.tlsCert, keyFile: g.tlsKey }, "--tls");
  const ca = g.tlsCa === undefined ? undefined : readCaBundle(g.tlsCa, "--tls-ca");
  return { tls: { ca, ...(own === undefined ? {} : { cert: own.cert, key: own.key }), ...(g.tlsServerName === undefined ? {} : { serverName: g.tlsServerName }) } };
}
