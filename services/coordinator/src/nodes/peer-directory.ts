import type { MessageInitShape } from "@bufbuild/protobuf";
import { mintPeerTicket, peerKeyBytes, type Clock } from "@warden/common";
import type { NodeRecord } from "@warden/cluster";
import type { PeerSourceSchema } from "@warden/proto";
import { PeerPlan } from "./peer-plan.js";

/** Pulls of one digest one agent serves at once (the tree's fan-out; the agent itself caps uploads at 4). */
export const peerFanout = 2;
/** A ticket's life: long enough for a start queued behind others, under the holder's cap (maxPeerTicketLifetimeMs, 10 min). */
export const peerTicketLifetimeMs = 5 * 60_000;

type PeerInit = MessageInitShape<typeof PeerSourceSchema>;

/** What a start is sent with: each digest's peers, and what to call when the start ended (its pulls free their peers). */
export interface PeerGrant {
  readonly peers: ReadonlyMap<string, PeerInit[]>;
  release(): void;
}

/**
 * Peer sources for starts (services/agent/docs/artifacts.md, "Peer-to-peer
 * fetch"): for each digest a start must pull, one node that holds it (its
 * heartbeats list it) or is pulling it now (a start this coordinator sent),
 * chosen by PeerPlan with fan-out {@link peerFanout}, with a ticket minted
 * under that node's peer key for (digest, requester, holder, expiry). Only
 * agents that registered a peer key take part, as holders and requesters.
 * The holders of a digest are found by a pass over the nodes per artifact of
 * a start (starts are rare next to heartbeats; a fleet is its node count).
 */
export class PeerDirectory {
  private readonly keys = new Map<string, Uint8Array>();
  private readonly plan = new PeerPlan(peerFanout);

  constructor(private readonly o: { readonly clock: Clock; readonly nodes: () => Iterable<NodeRecord<unknown>>; readonly node: (nodeId: string) => NodeRecord<unknown> | undefined; /** false (config `peerFetch: false`): no start names a peer; every pull is from its origin. @default true */ readonly enabled?: boolean }) {}

  /** A Register's peer key (empty: the agent serves no peers). One entry per node id that registered. */
  setKey(nodeId: string, key: Uint8Array): void {
    if (key.length === peerKeyBytes) this.keys.set(nodeId, Uint8Array.from(key));
    else this.keys.delete(nodeId);
  }

  grant(requester: string, artifacts: readonly { readonly sha256: string }[]): PeerGrant {
    const none: PeerGrant = { peers: new Map(), release: () => {} };
    if (this.o.enabled === false || artifacts.length === 0 || !this.keys.has(requester)) return none;
    const peers = new Map<string, PeerInit[]>();
    const assigned: string[] = [];
    const expiresAtMs = this.o.clock.wallNow() + peerTicketLifetimeMs;
    for (const a of artifacts) {
      if (peers.has(a.sha256)) continue;
      const holders: string[] = [];
      for (const n of this.o.nodes()) {
        if (n.nodeId !== requester && n.state === "ready" && !n.embedded && this.keys.has(n.nodeId) && n.artifactCache?.digests?.has(a.sha256) === true) holders.push(n.nodeId);
      }
      const peerId = this.plan.assign(a.sha256, requester, holders);
      assigned.push(a.sha256);
      const rec = peerId === undefined ? undefined : this.o.node(peerId);
      const key = peerId === undefined ? undefined : this.keys.get(peerId);
      if (rec === undefined || key === undefined || rec.state !== "ready") {
        peers.set(a.sha256, []);
        continue;
      }
      const ticket = mintPeerTicket(key, { sha256: a.sha256, requesterNodeId: requester, holderNodeId: rec.nodeId, expiresAtMs });
      peers.set(a.sha256, [{ nodeId: rec.nodeId, address: rec.address, ticket, expiresAtMs: BigInt(expiresAtMs) } satisfies PeerInit]);
    }
    let released = false;
    return {
      peers,
      release: () => {
        if (released) return;
        released = true;
        for (const sha of assigned) this.plan.done(sha, requester);
      },
    };
  }
}
