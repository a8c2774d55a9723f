import { EvictionFailedOutcome, EvictionReason, type OrphanProcess } from "@warden/proto";
import type { NodeEventKind } from "@warden/cluster";
import type { EventInit } from "@warden/events";
import type { Outbox } from "@warden/outbox";
import type { EventHub } from "../admin/event-hub.js";
import { nodeReportLimits } from "./node-report-limits.js";

// The audit events of the node table's callbacks, shared by startCoordinator
// and the simulation's coordinator assembly (test/sim/coordinator) so the
// simulation checks the events production publishes, not a copy of them.

/** A node registered, went unreachable or was lost; undefined for `ready` (logged, not audited). */
export function nodeEventInit(nodeId: string, kind: NodeEventKind, labels: Record<string, string>, reason: string): EventInit | undefined {
  switch (kind) {
    case "registered":
      return { nodeId, payload: { case: "nodeRegistered", value: { $typeName: "warden.v1.NodeRegistered", labels } } };
    case "unreachable":
      return { nodeId, payload: { case: "nodeUnreachable", value: { $typeName: "warden.v1.NodeUnreachable" } } };
    case "lost":
    case "lost-by-operator":
      return { nodeId, payload: { case: "nodeLost", value: { $typeName: "warden.v1.NodeLost", byOperator: kind === "lost-by-operator", reason } } };
    case "ready":
      return undefined;
  }
}

/**
 * One event per node per heartbeat, whatever the count: the envelope and
 * pid/memory_bytes describe the first new orphan, `pids` the first few.
 * Undefined when none was adopted.
 */
export function orphansAdoptedInit(nodeId: string, adopted: readonly OrphanProcess[]): EventInit | undefined {
  const [first] = adopted;
  if (first === undefined) return undefined;
  const pids = adopted.slice(0, nodeReportLimits.orphanEventPids).map((o) => o.pid);
  return {
    nodeId,
    model: first.model,
    address: first.address,
    incarnation: `pid:${String(first.pid)}`,
    payload: { case: "orphanAdopted", value: { $typeName: "warden.v1.OrphanAdopted", pid: first.pid, memoryBytes: first.memoryBytes, count: adopted.length, pids } },
  };
}

/** An orphan's stop (reason orphan) started, ended, or failed (leaving it a leftover). */
export function orphanStopInit(nodeId: string, o: OrphanProcess, kind: "stopping" | "stopped" | "failed", detail: string): EventInit {
  const base = { nodeId, model: o.model, address: o.address, incarnation: `pid:${String(o.pid)}` };
  switch (kind) {
    case "stopping":
      return { ...base, payload: { case: "evictionStarted", value: { $typeName: "warden.v1.EvictionStarted", reason: EvictionReason.ORPHAN, trigger: "orphan grace", wasBusy: false, force: false, openRequestIds: [] } } };
    case "stopped":
      return { ...base, payload: { case: "evictionStopped", value: { $typeName: "warden.v1.EvictionStopped", reason: EvictionReason.ORPHAN, alreadyGone: detail !== "", stopDurationMs: 0n } } };
    case "failed":
      return { ...base, payload: { case: "evictionFailed", value: { $typeName: "warden.v1.EvictionFailed", reason: EvictionReason.ORPHAN, error: detail, outcome: EvictionFailedOutcome.LEFTOVER, openRequestIds: [], terminalReason: "" } } };
  }
}

export function unreachabilityPausedInit(paused: boolean, unreachable: number, total: number): EventInit {
  return { payload: { case: "unreachabilityPaused", value: { $typeName: "warden.v1.UnreachabilityPaused", paused, unreachableNodes: unreachable, totalNodes: total } } };
}

/** Incarnations of the open stop intents on `nodeId` (NodeTable's openIntentsOn). */
export function openIntentsOn(outbox: Pick<Outbox, "openStopIntentsOn">, nodeId: string): string[] {
  return outbox.openStopIntentsOn(nodeId);
}

/**
 * The node table found these open stop intents of `nodeId` gone (two applied
 * inventories in a row lacked them, the loader tracks none): each still open
 * is settled (cleared, and reported reaped).
 */
export function reapGoneIntents(outbox: Pick<Outbox, "openStopIntents" | "clearStopIntent">, hub: Pick<EventHub, "publish">, nodeId: string, gone: readonly string[]): void {
  const settled = new Set(gone);
  for (const i of outbox.openStopIntents()) {
    if (i.nodeId !== nodeId || !settled.has(i.incarnation)) continue;
    void outbox.clearStopIntent(i.incarnation).catch(() => undefined);
    void hub.publish({ nodeId, model: i.model, address: i.address, incarnation: i.incarnation, payload: { case: "leftoverReaped", value: { $typeName: "warden.v1.LeftoverReaped", attempts: 0 } } });
  }
}
