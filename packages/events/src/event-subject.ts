import type { Event } from "@warden/proto";
import { invalidArgument } from "@warden/common";
import { eventTypeOf, isEventType, type EventType } from "./event-type.js";
import { escapeSubjectToken, unescapeSubjectToken } from "./subject-token.js";

/** Every event subject starts with this; the JetStream stream binds `warden.events.>`. */
export const eventSubjectPrefix = "warden.events";

/** The wildcard subject covering every event. */
export const allEventsSubject = `${eventSubjectPrefix}.>`;

/**
 * `warden.events.<type>.<node>.<model>` (DESIGN §4). The type keeps its dot
 * (`eviction.started` is two tokens, `recovered` one) so operators can subscribe
 * to `warden.events.eviction.>`; node and model are escaped into one token each,
 * so they can never inject a wildcard or an extra token.
 */
export function eventSubject(type: EventType, nodeId: string, model: string): string {
  return `${eventSubjectPrefix}.${type}.${escapeSubjectToken(nodeId)}.${escapeSubjectToken(model)}`;
}

/** The subject an event is published on. */
export function subjectForEvent(event: Pick<Event, "payload" | "nodeId" | "model">): string {
  return eventSubject(eventTypeOf(event), event.nodeId, event.model);
}

/** The parts of an event subject. */
export interface ParsedEventSubject {
  readonly type: EventType;
  readonly nodeId: string;
  readonly model: string;
}

/** Inverse of {@link eventSubject}; INVALID_ARGUMENT for anything else. */
export function parseEventSubject(subject: string): ParsedEventSubject {
  const prefix = `${eventSubjectPrefix}.`;
  if (!subject.startsWith(prefix)) throw invalidArgument("subject", `not an event subject: "${subject}"`);
  const tokens = subject.slice(prefix.length).split(".");
  if (tokens.length < 3) throw invalidArgument("subject", `too few tokens in "${subject}"`);
  const model = tokens.pop() ?? "";
  const node = tokens.pop() ?? "";
  const type = tokens.join(".");
  if (!isEventType(type)) throw invalidArgument("subject", `unknown event type "${type}" in "${subject}"`);
  return { type, nodeId: unescapeSubjectToken(node), model: unescapeSubjectToken(model) };
}
