import type { PeerCertificate } from "node:tls";
import { Code, WardenError } from "@warden/common";
import { identityOfCertificate } from "./peer-identity.js";

/**
 * An extra check of a TLS server's certificate, run on every handshake after
 * the CA and host-name checks passed: an Error refuses the connection (no
 * request goes out on it), undefined accepts it.
 */
export type ServerCertificateCheck = (cert: PeerCertificate) => Error | undefined;

/** Marks the refusal in the message grpc-js reports for the failed connection, so the client can say it plainly. */
export const nodeMismatchMarker = "[warden:node-certificate]";

/** What a server certificate names, in words for an error. */
function named(cert: PeerCertificate): string {
  const id = identityOfCertificate(cert);
  return id.nodeId === undefined ? `a certificate naming no node (CN "${id.commonName}")` : `a certificate issued to node "${id.nodeId}"`;
}

/**
 * The check that a server is the agent of node `nodeId`: its certificate must
 * carry the URI SAN `urn:warden:node:<nodeId>` (`warden certs issue agent
 * <nodeId>`). The CA signs every node's certificate, so a valid chain alone
 * says only "some node": without this a node's credentials could point the
 * coordinator at another node's agent.
 */
export function expectNodeCertificate(nodeId: string, address: string): ServerCertificateCheck {
  return (cert) => {
    if (identityOfCertificate(cert).nodeId === nodeId) return undefined;
    // grpc-js carries only this message to the failed call: the marker lets nodeMismatchOf find it.
    return new Error(`${nodeMismatchMarker} ${nodeMismatch(nodeId, address, named(cert)).rawMessage}`);
  };
}

/** The refusal for an agent address that does not serve node `nodeId`'s certificate. */
export function nodeMismatch(nodeId: string, address: string, found: string): WardenError {
  return new WardenError(Code.PermissionDenied, `node "${nodeId}": the agent at ${address} presents ${found}, not node "${nodeId}"'s; refusing to command it`, { details: { field: "node_id", nodeId, address } });
}

/**
 * The node-certificate refusal `err` carries, when a call failed because the
 * connection's check refused the server: grpc-js reports a failed handshake as
 * UNAVAILABLE with the check's message inside; this gives it back as the
 * PERMISSION_DENIED it is. Undefined for any other error.
 */
export function nodeMismatchOf(err: WardenError, nodeId: string, address: string): WardenError | undefined {
  if (err.code === Code.PermissionDenied && err.details["field"] === "node_id") return err;
  if (err.code !== Code.Unavailable) return undefined;
  const at = err.rawMessage.indexOf(nodeMismatchMarker);
  if (at < 0) return undefined;
  const found = /presents (.*?), not node/.exec(err.rawMessage.slice(at))?.[1] ?? "another certificate";
  return nodeMismatch(nodeId, address, found);
}
