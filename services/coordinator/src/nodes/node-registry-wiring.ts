import type { Clock, Logger } from "@warden/common";
import type { Outbox } from "@warden/outbox";
import type { EventHub } from "../admin/event-hub.js";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import type { CoordinatorHaWiring } from "../ha/coordinator-ha-wiring.js";
import type { TakeoverSettings } from "../ha/takeover-settings.js";
import type { AgentClient } from "./grpc-agent-connector.js";
import { nodeEventInit, openIntentsOn, orphanStopInit, orphansAdoptedInit, reapGoneIntents, unreachabilityPausedInit } from "./node-audit-events.js";
import { NodeRegistry } from "./node-registry.js";
import type { NodesKnownAtStart } from "./nodes-known-at-start.js";
import type { OutageServing } from "./outage-serving.js";

/** Made after the registry (they need the loader); its callbacks reach them through this. */
export interface LateNodeHooks {
  takeover?: TakeoverSettings;
  knownAtStart?: NodesKnownAtStart;
}

/**
 * The coordinator's node registry wired to the rest of it (startCoordinator's
 * wiring, kept apart): node, orphan, foreign-process and pause changes become
 * audit events and log lines, stop intents the inventories show gone are
 * reaped from the outbox, and the outage serving and the late hooks hear of
 * each node event.
 */
export function wireNodeRegistry(w: {
  readonly config: CoordinatorConfig;
  readonly clock: Clock;
  readonly log: Logger;
  readonly connect: (address: string, nodeId: string) => AgentClient;
  readonly ha: CoordinatorHaWiring | undefined;
  readonly late: LateNodeHooks;
  readonly outbox: Outbox;
  readonly hub: EventHub;
  readonly outage: OutageServing;
}): NodeRegistry {
  const { config, clock, log, late, outbox, hub, outage } = w;
  return new NodeRegistry({
    clock,
    log: log.child({ component: "nodes" }),
    graceMs: config.nodeGraceMs,
    peerFetch: config.peerFetch,
    connect: w.connect,
    ...(w.ha === undefined ? {} : { leaderEpoch: w.ha.leaderEpoch, onStaleEpoch: w.ha.onSuperseded }),
    onHeartbeatApplied: (nodeId: string) => late.takeover?.inventoryApplied(nodeId),
    maxNodes: config.limits.maxNodes,
    maxInventory: config.limits.maxInventoryPerHeartbeat,
    lostAfterMs: config.nodeLostAfterMs,
    orphanGraceMs: config.orphanGraceMs,
    openIntentsOn: (nodeId) => openIntentsOn(outbox, nodeId),
    onIntentsGone: (nodeId, gone) => {
      reapGoneIntents(outbox, hub, nodeId, gone);
    },
    onOrphansAdopted: (nodeId, adopted) => {
      const init = orphansAdoptedInit(nodeId, adopted);
      if (init !== undefined) void hub.publish(init);
    },
    onOrphan: (nodeId, o, kind, detail) => {
      void hub.publish(orphanStopInit(nodeId, o, kind, detail));
    },
    onForeign: (nodeId, fresh) => {
      // Another program or another Warden in the node's port range: reported, never signalled.
      log.warn("foreign processes in a node's port range", { nodeId, count: fresh.length });
      const first = fresh.slice(0, 8);
      void hub.publish({ nodeId, payload: { case: "foreignDetected", value: { $typeName: "warden.v1.ForeignDetected", count: fresh.length, pids: first.map((f) => f.pid), addresses: first.map((f) => f.address) } } });
    },
    onPauseChange: (paused, unreachable, total) => {
      log.warn(paused ? "most nodes unreachable: pausing unreachability-driven actions" : "unreachability pause over", { unreachable, total });
      void hub.publish(unreachabilityPausedInit(paused, unreachable, total));
    },
    onNodeEvent: (nodeId, kind, labels, reason = "") => {
      if (kind === "registered" || kind === "ready") late.takeover?.nodeHeard(nodeId);
      if (kind === "registered") late.knownAtStart?.heard(nodeId);
      if (kind === "lost-by-operator") log.warn("node declared lost by an operator", { nodeId, reason });
      if (kind === "ready") log.info("node reachable again", { nodeId });
      outage.nodeEvent(nodeId, kind);
      const init = nodeEventInit(nodeId, kind, labels, reason);
      if (init !== undefined) void hub.publish(init);
    },
  });
}
