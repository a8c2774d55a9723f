import type { Event } from "@warden/proto";
import { invalidArgument } from "@warden/common";

/** The name of a case of the Event `payload` oneof, as protobuf-es spells it. */
export type PayloadCase = NonNullable<Event["payload"]["case"]>;

/**
 * Event type names (DESIGN §4), keyed by payload case. The type is the proto
 * field name with its first "_" turned into "." and later ones into "-"
 * (`backend_load_failed` → `backend.load-failed`); `recovered` has one word.
 * Kept as data so a new payload case without a name fails to compile.
 */
const typeByCase = {
  evictionStarted: "eviction.started",
  evictionStopped: "eviction.stopped",
  evictionFailed: "eviction.failed",
  evictionRetried: "eviction.retried",
  leftoverStuck: "leftover.stuck",
  leftoverReaped: "leftover.reaped",
  orphanAdopted: "orphan.adopted",
  instanceAdopted: "instance.adopted",
  backendLoaded: "backend.loaded",
  backendLoadFailed: "backend.load-failed",
  backendExited: "backend.exited",
  nodeRegistered: "node.registered",
  nodeUnreachable: "node.unreachable",
  nodeLost: "node.lost",
  nodeDrained: "node.drained",
  policyLimitExceeded: "policy.limit-exceeded",
  recovered: "recovered",
  unreachabilityPaused: "unreachability.paused",
  instanceForgotten: "instance.forgotten",
  journalRepaired: "journal.repaired",
  foreignDetected: "foreign.detected",
  replicaScaledUp: "replica.scaled-up",
  replicaScaledDown: "replica.scaled-down",
  replicaScaleBlocked: "replica.scale-blocked",
  replicaScaleSet: "replica.scale-set",
  nodeLimitsSet: "node.limits-set",
  coordinatorLeader: "coordinator.leader",
  nodeDrainStarted: "node.drain-started",
  nodeUndrained: "node.undrained",
  policyUpdated: "policy.updated",
  loadWaiting: "load.waiting",
  loadFailed: "load.failed",
  rolloutStarted: "rollout.started",
  rolloutFinished: "rollout.finished",
  backendInstalled: "backend.installed",
  backendRemoved: "backend.removed",
  artifactEvicted: "artifact.evicted",
  artifactPulled: "artifact.pulled",
} as const satisfies Record<PayloadCase, string>;

/** Every event type name, e.g. `"eviction.started"`. */
export type EventType = (typeof typeByCase)[PayloadCase];

/** All event types, in proto field order. */
export const eventTypes: readonly EventType[] = Object.values(typeByCase);

const caseByType = new Map<string, PayloadCase>(
  (Object.entries(typeByCase) as [PayloadCase, EventType][]).map(([c, t]) => [t, c]),
);

/** True when `value` names an event type. */
export function isEventType(value: string): value is EventType {
  return caseByType.has(value);
}

/** Parses a type name given by a person or a config (`--type eviction.started`); INVALID_ARGUMENT otherwise. */
export function parseEventType(value: string, field = "type"): EventType {
  if (isEventType(value)) return value;
  throw invalidArgument(field, `unknown event type "${value}"; known: ${eventTypes.join(", ")}`);
}

/** The type name of a payload case. */
export function eventTypeOfCase(payloadCase: PayloadCase): EventType {
  return typeByCase[payloadCase];
}

/** The payload case carrying a type. */
export function payloadCaseOf(type: EventType): PayloadCase {
  const c = caseByType.get(type);
  // Unreachable for a well-typed argument: the map is built from the same table.
  if (c === undefined) throw invalidArgument("type", `unknown event type "${type as string}"`);
  return c;
}

/**
 * The type of an event. An event without a payload has no type: INVALID_ARGUMENT
 * (such an event is never created by the factory and is refused by the codec).
 */
export function eventTypeOf(event: Pick<Event, "payload">): EventType {
  const c = event.payload.case;
  if (c === undefined) throw invalidArgument("event.payload", "event has no payload, so no type");
  return typeByCase[c];
}
