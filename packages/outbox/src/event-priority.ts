import type { Event } from "@warden/proto";
import { eventTypeOf } from "@warden/events";

/**
 * How much an event matters when the outbox is full. `low`: reports a peer
 * drives and repeats (orphan.*, node.*, foreign.*) — dropped first, and
 * displaced by a `critical` one. Everything else is `critical`: evictions,
 * leftovers, instance lifecycle and what restart recovery folds (a new event
 * type is critical until listed here).
 */
export type EventPriority = "critical" | "low";

const lowPrefixes = ["orphan.", "node.", "foreign."] as const;

/** The default priority of an event, by its type. */
export function eventPriorityOf(event: Pick<Event, "payload">): EventPriority {
  const type = eventTypeOf(event);
  return lowPrefixes.some((p) => type.startsWith(p)) ? "low" : "critical";
}
