import type { Event } from "@warden/proto";
import { invalidArgument } from "@warden/common";
import { eventTypeOf, type EventType } from "./event-type.js";
import { allEventsSubject, eventSubjectPrefix } from "./event-subject.js";
import { escapeSubjectToken } from "./subject-token.js";

/**
 * Which events a reader wants; every given criterion must match (absent = any).
 * Used by AdminService.WatchEvents and the NATS subscriber alike.
 */
export interface EventFilter {
  /** Any of these types; empty or absent = every type. */
  readonly types?: readonly EventType[];
  /** Exact node id. */
  readonly nodeId?: string;
  /** Exact model id. */
  readonly model?: string;
}

/** True when the event passes the filter. */
export function matchesEventFilter(event: Pick<Event, "payload" | "nodeId" | "model">, filter: EventFilter): boolean {
  if (filter.nodeId !== undefined && event.nodeId !== filter.nodeId) return false;
  if (filter.model !== undefined && event.model !== filter.model) return false;
  const types = filter.types;
  if (types !== undefined && types.length > 0 && !types.includes(eventTypeOf(event))) return false;
  return true;
}

/**
 * The narrowest single NATS subject that covers the filter, for a server-side
 * consumer filter (nats-server 2.9 allows one filter subject per consumer);
 * the caller applies {@link matchesEventFilter} to what arrives for the rest.
 *
 * - one type → `warden.events.<type>.<node|*>.<model|*>` (exact);
 * - several types sharing a first word, all two-word (`eviction.started`,
 *   `eviction.failed`) → `warden.events.eviction.*.<node|*>.<model|*>`;
 * - otherwise `warden.events.>`: types have one or two tokens (`recovered` vs
 *   `eviction.started`), so node and model sit at different positions and no
 *   single wildcard subject can pin them without a type.
 */
export function eventFilterSubject(filter: EventFilter): string {
  const node = filter.nodeId === undefined ? "*" : escapeSubjectToken(filter.nodeId);
  const model = filter.model === undefined ? "*" : escapeSubjectToken(filter.model);
  const types = [...new Set(filter.types ?? [])];
  if (types.length === 1 && types[0] !== undefined) return `${eventSubjectPrefix}.${types[0]}.${node}.${model}`;
  if (types.length > 1) {
    const words = types.map((t) => t.split("."));
    const first = words[0]?.[0];
    if (first !== undefined && words.every((w) => w.length === 2 && w[0] === first)) {
      return `${eventSubjectPrefix}.${first}.*.${node}.${model}`;
    }
  }
  return allEventsSubject;
}

/** Validates a filter from client input (caps the type list). */
export function validateEventFilter(filter: EventFilter, maxTypes = 64): EventFilter {
  if ((filter.types?.length ?? 0) > maxTypes) throw invalidArgument("filter.types", `at most ${maxTypes} types`);
  return filter;
}
