import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@warden/grpc";
import { Code, WardenError, invalidArgument, isHex64, sleep, type Clock } from "@warden/common";
import type { FindPeersRequest, FindPeersResponseSchema } from "@warden/proto";
import type { PeerDirectory } from "./peer-directory.js";

/** Digests one FindPeers may ask for: an OCI image's most layers (the agent's maxManifestLayers). */
export const maxFindPeersDigests = 128;
/** Longest node id a FindPeers may name (as a peer's, peer-source.ts). */
export const maxFindPeersNodeIdChars = 128;
/**
 * How long the coordinator holds one FindPeers open at most: the peers' slots
 * are freed then even if the caller never ends it (a host that vanished
 * without closing its connection). A pull still running after it only loses
 * its slot in the fan-out count; its tickets expired long before (5 min).
 */
export const peerGrantHoldMs = 30 * 60_000;
/** FindPeers one node may hold open at once (it asks once per bundle it installs); the next is RESOURCE_EXHAUSTED. */
export const maxOpenPeerGrantsPerNode = 8;

type FindPeersResponseInit = MessageInitShape<typeof FindPeersResponseSchema>;

/**
 * The whole request checked before anything is granted, each problem a typed
 * error naming its field: node_id registered (and not too long), 1 to
 * {@link maxFindPeersDigests} digests of 64 lowercase hex characters, none repeated.
 */
export function validateFindPeers(req: FindPeersRequest, registered: (nodeId: string) => boolean): void {
  if (req.nodeId === "" || req.nodeId.length > maxFindPeersNodeIdChars) throw invalidArgument("node_id", `must be 1 to ${String(maxFindPeersNodeIdChars)} characters`);
  if (req.sha256.length === 0 || req.sha256.length > maxFindPeersDigests) throw invalidArgument("sha256", `must name 1 to ${String(maxFindPeersDigests)} digests, got ${String(req.sha256.length)}`);
  const seen = new Map<string, number>();
  for (const [i, s] of req.sha256.entries()) {
    const field = `sha256[${String(i)}]`;
    if (!isHex64(s)) throw invalidArgument(field, `must be 64 lowercase hex characters, got ${JSON.stringify(s.slice(0, 80))}`);
    const j = seen.get(s);
    if (j !== undefined) throw invalidArgument(field, `repeats sha256[${String(j)}]`);
    seen.set(s, i);
  }
  if (!registered(req.nodeId)) throw new WardenError(Code.FailedPrecondition, `node_id: "${req.nodeId}" is not registered with this coordinator; Register first`, { details: { field: "node_id" } });
}

/**
 * NodeService.FindPeers for one call: validated whole, then one answer with
 * each digest's peers as PeerDirectory grants them for a start, held until
 * the caller ends the call or {@link peerGrantHoldMs} passed, then released
 * (the peers serve one pull fewer). `open` counts each node's calls held now.
 */
export async function* findPeers(req: FindPeersRequest, ctx: HandlerContext, o: { readonly peers: PeerDirectory; readonly clock: Clock; readonly registered: (nodeId: string) => boolean; readonly open: Map<string, number> }): AsyncGenerator<FindPeersResponseInit> {
  validateFindPeers(req, o.registered);
  const held = o.open.get(req.nodeId) ?? 0;
  if (held >= maxOpenPeerGrantsPerNode) throw new WardenError(Code.ResourceExhausted, `node_id: "${req.nodeId}" holds ${String(maxOpenPeerGrantsPerNode)} FindPeers open already; pull from the origin`, { details: { field: "node_id" } });
  o.open.set(req.nodeId, held + 1);
  const grant = o.peers.grant(req.nodeId, req.sha256.map((sha256) => ({ sha256 })));
  try {
    yield { artifacts: req.sha256.map((sha256) => ({ sha256, peers: grant.peers.get(sha256) ?? [] })) };
    // The slots stay taken while the caller pulls: its cancel (or its connection's end) aborts the signal.
    await sleep(o.clock, peerGrantHoldMs, ctx.signal).catch(() => undefined);
  } finally {
    grant.release();
    const n = (o.open.get(req.nodeId) ?? 1) - 1;
    if (n <= 0) o.open.delete(req.nodeId);
    else o.open.set(req.nodeId, n);
  }
}
