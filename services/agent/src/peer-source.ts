import { createClient, identityOfCertificate, type Client, type CreateClientOptions, type ServerCertificateCheck } from "@warden/grpc";
import { PeerArtifactService, type PeerSource as PeerSourceMessage } from "@warden/proto";
import { invalidArgument, isHex64 } from "@warden/common";
import type { ArtifactSource } from "./artifact-pull.js";
import { storeSource } from "./artifact-sources.js";

/** One peer a start may fetch an artifact from (StartBackendRequest ModelArtifact.peers), checked. */
export interface PeerSpec {
  readonly nodeId: string;
  readonly address: string;
  readonly ticket: string;
  readonly expiresAtMs: number;
}

/** Peers per artifact a start may name. */
export const maxPeersPerArtifact = 8;
/** Longest peer node id (also a requester's). */
export const maxPeerNodeIdChars = 128;
/** Longest peer address (host:port). */
export const maxPeerAddressChars = 256;

/** The request's peers of one artifact; anything outside the bounds refuses the start, naming the field. */
export function checkPeers(field: string, peers: readonly PeerSourceMessage[]): PeerSpec[] {
  if (peers.length > maxPeersPerArtifact) throw invalidArgument(field, `at most ${String(maxPeersPerArtifact)} peers, got ${String(peers.length)}`);
  return peers.map((p, i) => {
    const f = `${field}[${String(i)}]`;
    if (p.nodeId === "" || p.nodeId.length > maxPeerNodeIdChars) throw invalidArgument(`${f}.node_id`, `must be 1 to ${String(maxPeerNodeIdChars)} characters`);
    if (!/^[^\s/]+:\d{1,5}$/.test(p.address) || p.address.length > maxPeerAddressChars) throw invalidArgument(`${f}.address`, `must be host:port, at most ${String(maxPeerAddressChars)} characters`);
    if (!isHex64(p.ticket)) throw invalidArgument(`${f}.ticket`, "must be 64 lowercase hex characters");
    if (p.expiresAtMs <= 0n) throw invalidArgument(`${f}.expires_at_ms`, "required");
    return { nodeId: p.nodeId, address: p.address, ticket: p.ticket, expiresAtMs: Number(p.expiresAtMs) };
  });
}

/**
 * HTTP/2 receive window of a peer connection: 8 MiB rather than grpc-js's 64 KiB, which
 * stalls a stream of 1 MiB chunks on a window update every 64 KiB (bounded memory: one
 * window per peer connection, at most maxPeersPerArtifact per artifact being pulled).
 */
export const peerChannelOptions = { "grpc-node.flow_control_window": 8 * 1024 * 1024 };

/** Marks a peer's refused certificate in the error grpc-js reports for the failed connection (peerCertificateRefusal finds it). */
const peerCertificateMarker = "[warden:peer-certificate]";

/**
 * The check that the agent at `address` is node `nodeId`'s: its server
 * certificate must carry `urn:warden:node:<nodeId>` (`warden certs issue agent`),
 * as the coordinator requires of every agent it dials. The CA signs every
 * node's certificate, so a valid chain alone says only "some node": without
 * this, an address that changed hands after the coordinator last saw it
 * (another node's agent now listening there) would be read from as the peer.
 */
export function expectPeerCertificate(nodeId: string, address: string): ServerCertificateCheck {
  return (cert) => {
    const id = identityOfCertificate(cert);
    if (id.nodeId === nodeId) return undefined;
    const found = id.nodeId === undefined ? `a certificate naming no node (CN "${id.commonName}")` : `a certificate issued to node "${id.nodeId}"`;
    return new Error(`${peerCertificateMarker} peer node "${nodeId}": the agent at ${address} presents ${found}, not node "${nodeId}"'s; not fetching from it`);
  };
}

/** The sentence of a refused peer certificate `message` carries (a failed pull's, which wraps grpc-js's), or undefined. */
export function peerCertificateRefusal(message: string): string | undefined {
  const at = message.indexOf(peerCertificateMarker);
  if (at < 0) return undefined;
  const rest = message.slice(at + peerCertificateMarker.length + 1);
  const end = rest.indexOf("; not fetching from it");
  return end < 0 ? rest : rest.slice(0, end);
}

/**
 * Dials peers (one client per node and address, kept), with the agent's own
 * TLS: what a peer's listener expects of a node. Under mutual TLS (the
 * agent's TLS has a CA) each client also checks, on every handshake, that
 * the server's certificate names the node the coordinator said holds the
 * artifact there (expectPeerCertificate).
 */
export class PeerClients {
  private readonly clients = new Map<string, Client<typeof PeerArtifactService>>();
  constructor(private readonly options: CreateClientOptions) {}

  get(peer: Pick<PeerSpec, "nodeId" | "address">): Client<typeof PeerArtifactService> {
    // Keyed by both: the same address named for another node gets its own check.
    const key = `${peer.nodeId}@${peer.address}`;
    let c = this.clients.get(key);
    if (c === undefined) {
      // Bounded by the peers starts name (at most maxPeersPerArtifact each); a fleet is tens to hundreds of agents.
      const tls = this.options.tls;
      const mutual = tls?.ca !== undefined && tls.cert !== undefined;
      c = createClient(PeerArtifactService, peer.address, mutual ? { ...this.options, tls: { ...tls, verify: expectPeerCertificate(peer.nodeId, peer.address) } } : this.options);
      this.clients.set(key, c);
    }
    return c;
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}

/**
 * An artifact read from another agent's cache (PeerArtifactService), with the
 * ticket the coordinator granted this node for it. The chunks are judged as
 * the coordinator store's are (offset, size); the whole file's SHA-256 is
 * checked by the pull as for any source.
 */
export function peerSource(client: Client<typeof PeerArtifactService>, selfNodeId: string, peer: PeerSpec, sha256: string, sizeBytes: number): ArtifactSource {
  const reader = (_path: string, offset: number, signal: AbortSignal): AsyncIterable<{ offset: bigint; totalBytes: bigint; data: Uint8Array }> =>
    client.readPeerArtifact({ sha256, sizeBytes: BigInt(sizeBytes), offset: BigInt(offset), requesterNodeId: selfNodeId, ticket: peer.ticket, expiresAtMs: BigInt(peer.expiresAtMs) }, { signal });
  return storeSource(reader, sha256, sizeBytes, `peer ${JSON.stringify(peer.nodeId)} (${peer.address})`);
}
