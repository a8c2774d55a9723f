import { Code, WardenError } from "@warden/common";
import { isIP } from "node:net";

/** The host of `host:port` / `[v6]:port`, without brackets. */
export function hostOf(address: string): string {
  const colon = address.lastIndexOf(":");
  return (colon < 0 ? address : address.slice(0, colon)).replace(/^\[(.*)\]$/, "$1");
}

/** True for addresses only this machine can reach: 127.0.0.0/8, ::1 and `localhost`. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  if (h === "localhost" || h === "::1" || h === "0:0:0:0:0:0:0:1") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  return h.startsWith("::ffff:127.");
}

/**
 * Refuses to serve plaintext where another machine can connect: whoever
 * reaches the port could register a node, capture prompts or start and
 * stop processes. Loopback stays plaintext (the one-command setup), and
 * `insecure` is the operator's explicit choice (a trusted network, a TLS
 * terminating proxy in front).
 */
export function checkPlaintextListen(address: string, o: { readonly tls: boolean; readonly insecure: boolean }): void {
  if (o.tls || o.insecure || isLoopbackHost(hostOf(address))) return;
  throw new WardenError(
    Code.FailedPrecondition,
    `refusing to listen on ${address} in plaintext: it is not a loopback address, so anyone who can reach it could register nodes, read prompts and start or stop backends. ` +
      `Configure tls (cert and key files; \`warden certs init\` makes a dev CA), listen on 127.0.0.1, or set insecure: true (--insecure) to accept the risk`,
    { details: { field: "listen" } },
  );
}
