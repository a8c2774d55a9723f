import type { NodeHealthState } from "./node-record.js";

/**
 * What moves a node's health: a heartbeat, silence past the grace, silence
 * past grace + lost-after (only while not paused), an operator's word.
 */
export type HealthCause = "heartbeat" | "silent" | "timeout" | "operator";

/** The node's health after `cause`, or undefined when it does not change: every transition, in one place. */
export function nextHealth(state: NodeHealthState, cause: HealthCause): NodeHealthState | undefined {
  switch (cause) {
    case "heartbeat":
      return state === "ready" ? undefined : "ready";
    case "silent":
      return state === "ready" ? "unreachable" : undefined;
    case "timeout":
      return state === "unreachable" ? "lost" : undefined;
    case "operator":
      return state === "lost" ? undefined : "lost";
  }
}

/** Mass unreachability: the share of unreachable nodes at which the fault is more likely ours. */
export interface Unreachability {
  readonly paused: boolean;
  readonly unreachable: number;
  readonly total: number;
}

/**
 * When most nodes (≥ 55 %, at least 3) are unreachable at once, the fault is
 * more likely ours (network, coordinator host) than theirs: actions driven by
 * unreachability (declaring nodes lost and placing their models elsewhere,
 * stopping orphans) pause. Embedded and lost nodes do not count, nor nodes
 * nobody vouches for (NodeRecord.vouched: no credential and no heartbeat yet).
 */
export function massUnreachability(nodes: Iterable<{ readonly embedded: boolean; readonly state: NodeHealthState; readonly vouched?: boolean }>): Unreachability {
  let total = 0;
  let unreachable = 0;
  for (const n of nodes) {
    // Nobody vouches for it (no credential, never a heartbeat): not evidence of our own fault.
    if (n.embedded || n.state === "lost" || n.vouched === false) continue;
    total++;
    if (n.state === "unreachable") unreachable++;
  }
  return { paused: unreachable >= 3 && unreachable >= 0.55 * total, unreachable, total };
}
