import type { NodeRecord, NodeRegistration } from "./node-record.js";
import type { NodeTableOptions } from "./node-table-options.js";

/** What register() copied from the request, and the client it chose. */
export type RegisteredParts<C> = Pick<NodeRecord<C>, "labels" | "gpus" | "version" | "backends" | "bundles" | "client">;

/**
 * The record a registration replaces `existing` with (NodeTable.register, on
 * a new address or a new boot epoch): what a new boot epoch starts afresh,
 * what the same boot epoch carries over. Pure: reads the clock, calls nothing
 * but the connector's agentPort (both the table's ports).
 */
export function registeredRecord<C>(init: NodeRegistration<C>, existing: NodeRecord<C> | undefined, o: Pick<NodeTableOptions<C>, "clock" | "connector">, parts: RegisteredParts<C>): NodeRecord<C> {
  const { labels, gpus, version, backends, bundles, client } = parts;
  const connector = o.connector;
  // Same boot epoch (a new address): the agent's sequence goes on, so the last
  // one seen and the fences stay — a reset would let an older heartbeat in.
  const sameBoot = existing?.bootEpoch === init.bootEpoch;
  return {
    nodeId: init.nodeId,
    address: init.address,
    labels,
    gpus,
    embedded: init.embedded ?? false,
    // A restart (new boot epoch) re-registers a node id that already earned its vouching: it still
    // counts, or a restart just before a partition would let the guard miss a full disruption.
    vouched: (init.embedded ?? false) || (init.credentialed ?? false) || existing?.vouched === true,
    version,
    backends,
    bundles,
    bootEpoch: init.bootEpoch,
    sequence: sameBoot ? existing.sequence : 0n,
    lastHeartbeatMs: o.clock.now(),
    lastHeartbeatWallMs: o.clock.wallNow(),
    heardMs: o.clock.now(),
    // Held heartbeats of the same boot are still held: each is released when its turn comes.
    heldHeartbeats: sameBoot ? existing.heldHeartbeats : 0,
    state: "ready",
    unreachableSinceMs: undefined,
    draining: existing?.draining ?? false,
    inventory: sameBoot ? existing.inventory : undefined,
    reported: sameBoot ? existing.reported : undefined,
    orphans: [],
    foreign: sameBoot ? existing.foreign : [],
    resources: existing?.resources,
    client,
    port: connector.agentPort(client, init.nodeId),
    missing: new Map(),
    // The same boot goes on with its sequence, so its inventories are still
    // "in a row". A new boot epoch is another agent process and sequence:
    // its inventories count afresh — a reset at worst waits one heartbeat
    // more, a carried count could clear an intent on its first word alone.
    intentMisses: sameBoot ? existing.intentMisses : new Map<string, number>(),
    fences: sameBoot ? existing.fences : new Map<string, bigint>(),
    watchAbort: undefined,
    agentLimits: init.limits ?? {},
    // A registration is followed by a heartbeat with the agent's whole digest set.
    artifactCache: sameBoot ? existing.artifactCache : undefined,
    settled: undefined,
  };
}
