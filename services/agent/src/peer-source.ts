import { createClient, type Client, type CreateClientOptions } from "@warden/grpc";
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

/** Dials peers (one client per address, kept), with the agent's own TLS: what a peer's listener expects of a node. */
export class PeerClients {
  private readonly clients = new Map<string, Client<typeof PeerArtifactService>>();
  constructor(private readonly options: CreateClientOptions) {}

  get(address: string): Client<typeof PeerArtifactService> {
    let c = this.clients.get(address);
    if (c === undefined) {
      // Bounded by the addresses starts name (at most maxPeersPerArtifact each); a fleet is tens to hundreds of agents.
      c = createClient(PeerArtifactService, address, this.options);
      this.clients.set(address, c);
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
