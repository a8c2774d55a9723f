import { connect as tlsConnect, checkServerIdentity, type PeerCertificate } from "node:tls";
import { isIP } from "node:net";
import { Code, WardenError, abortReason, parseHostPort } from "@warden/common";
import { identityOfCertificate, type ClientTls } from "@warden/grpc";

/** At most this long for the handshake with a registering agent's address (the agent's Register call allows 5 s). */
export const agentProbeTimeoutMs = 3_000;

/** Checks that `address` serves node `nodeId`'s agent certificate; rejects with a typed error naming `address` otherwise. */
export type AgentAddressProbe = (address: string, nodeId: string, signal: AbortSignal) => Promise<void>;

/**
 * Register's address check under mutual TLS: one TLS handshake with the
 * address the agent registers, presenting the coordinator's certificate, and
 * the server's certificate must be the CA's and carry `urn:warden:node:<nodeId>`.
 * Only the holder of that node's private key can serve it, so a node's
 * credentials cannot register another node's agent as theirs. Nothing is sent
 * over the connection; it closes at once. Every later dial checks the same
 * (expectNodeCertificate): this check refuses the registration early and
 * whole, the dial check holds when the address changes hands afterwards.
 */
export function agentAddressProbe(tlsNow: () => ClientTls): AgentAddressProbe {
  return (address, nodeId, signal) => {
    const { host, port } = parseHostPort(address, "address");
    if (signal.aborted) return Promise.reject(abortReason(signal));
    const tls = tlsNow();
    return new Promise<void>((resolve, reject) => {
      let found: PeerCertificate | undefined;
      const socket = tlsConnect({
        host,
        port,
        ALPNProtocols: ["h2"],
        minVersion: "TLSv1.2",
        ...(isIP(host) === 0 ? { servername: host } : {}),
        ...(tls.ca === undefined ? {} : { ca: tls.ca }),
        ...(tls.cert === undefined ? {} : { cert: tls.cert }),
        ...(tls.key === undefined ? {} : { key: tls.key }),
        checkServerIdentity: (h, cert) => {
          found = cert;
          return checkServerIdentity(h, cert);
        },
      });
      const settle = (err: WardenError | undefined): void => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        socket.destroy();
        if (err === undefined) resolve();
        else reject(err);
      };
      const onAbort = (): void => {
        settle(WardenError.from(abortReason(signal)));
      };
      const timer = setTimeout(() => {
        settle(new WardenError(Code.Unavailable, `address: "${address}": no TLS handshake within ${String(agentProbeTimeoutMs)} ms; node "${nodeId}" registers the address its agent serves (advertiseAddress), which the coordinator must reach`, { details: { field: "address" } }));
      }, agentProbeTimeoutMs);
      signal.addEventListener("abort", onAbort, { once: true });
      socket.once("secureConnect", () => {
        const id = identityOfCertificate(socket.getPeerCertificate());
        if (id.nodeId === nodeId) settle(undefined);
        else settle(new WardenError(Code.PermissionDenied, `address: "${address}" refused for node "${nodeId}": it serves ${id.nodeId === undefined ? `a certificate naming no node (CN "${id.commonName}")` : `node "${id.nodeId}"'s certificate`}; a node may only register an address its own agent certificate serves`, { details: { field: "address" } }));
      });
      socket.once("error", (err: Error) => {
        const why = found !== undefined ? `its certificate was refused (${err.message})` : `cannot reach it (${err.message})`;
        settle(new WardenError(Code.Unavailable, `address: "${address}": ${why}; node "${nodeId}" registers the address its agent serves (advertiseAddress), which the coordinator must reach over mutual TLS`, { details: { field: "address" } }));
      });
    });
  };
}
