/**
 * Antithesis-style "sometimes" counters: each names a branch the campaign
 * must reach at least once (a leftover was reaped, a stop was registered
 * again, a node was declared lost, …), plus faults injected per type.
 */
export class Coverage {
  readonly counts = new Map<string, number>();

  hit(name: string, n = 1): void {
    this.counts.set(name, (this.counts.get(name) ?? 0) + n);
  }

  toJSON(): Record<string, number> {
    return Object.fromEntries([...this.counts.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}

/** Counters every campaign must reach (sim.heavy.test.ts fails on any never hit). */
export const requiredCoverage = [
  // A heartbeat would skip its reconcile, and the differential checker ran the full one in its place.
  "heartbeat.unchanged",
  "leftover.reaped",
  "eviction.registered-again",
  "eviction.leftover",
  "node.lost",
  "node.unreachable",
  // Health probes of instances on unreachable nodes at their in-flight bound: the rest queued in due order.
  "outage.probes-at-bound",
  "unreachability.paused",
  "adoption.remote-only",
  "adoption.leftover",
  "orphan.adopted",
  "orphan.stopped",
  "fence.stale-inventory-ignored",
  "eviction.stopped",
  "eviction.already-gone",
  "journal.torn-tail",
  "nats.duplicate-ack",
  "nats.dup-window-expired",
  "lease.completed-twice",
  "coordinator.restarted",
  "agent.restarted-amnesia",
  "agent.restarted-records",
  // An agent killed between a backend's spawn and its record (fault agent-crash-before-record).
  "agent.crashed-before-record",
  "stop.sigkill",
  "load.failed",
  "request.cancelled",
  "request.deadline",
  "port.recycled",
  // Replica profile seeds: scale-up on load and for the floor, scale-down, a blocked scale-up, one replica's failed stop.
  "replica.scaled-up.in-flight",
  "replica.scaled-up.min",
  "replica.scaled-down",
  "replica.scale-blocked",
  "replica.stop-failed",
  // Calls to models with routing: prefix, and ones its affinity sent past the least loaded replica.
  "route.prefix-hinted",
  "route.prefix-elsewhere",
  // HA profile seeds: a takeover, a zombie's stale command refused by a fence, a SIGSTOPped leader, a leader cut from the lease.
  "ha.takeover",
  "ha.zombie-refused",
  "ha.pause",
  "ha.lease-partition",
] as const;
