import { fromBinary, toBinary, toJson, type JsonObject } from "@bufbuild/protobuf";
import { EventSchema, type Event } from "@warden/proto";
import { Code, WardenError } from "@warden/common";
import { eventTypeOf, type EventType } from "./event-type.js";

// Encoded bytes by event identity: the journal and the publisher both need
// them, and encoding is the largest per-event cost after the NATS client's.
const encoded = new WeakMap<Event, Uint8Array>();

/**
 * Protobuf binary form of an event: the NATS payload and the journal record
 * body. Cached per event object, so events must not be mutated once created
 * (nothing in Warden does; the factory hands out finished events).
 */
export function encodeEvent(event: Event): Uint8Array {
  let bytes = encoded.get(event);
  if (bytes === undefined) {
    bytes = toBinary(EventSchema, event);
    encoded.set(event, bytes);
  }
  return bytes;
}

/**
 * Decodes a protobuf event. Bytes that do not parse, or an event without an id
 * or payload, are INVALID_ARGUMENT (a poison message, never retried).
 */
export function decodeEvent(bytes: Uint8Array): Event {
  let event: Event;
  try {
    event = fromBinary(EventSchema, bytes);
  } catch (err) {
    throw new WardenError(Code.InvalidArgument, `event: undecodable protobuf (${String(err)})`, { cause: err });
  }
  if (event.id === "") throw new WardenError(Code.InvalidArgument, "event: missing id");
  if (event.payload.case === undefined) throw new WardenError(Code.InvalidArgument, `event ${event.id}: missing payload`);
  return event;
}

/**
 * JSON rendering for people and JSONL files: protobuf-es canonical JSON
 * (uint64 as strings, timestamps as RFC 3339, camelCase names) with the type
 * name added first, e.g. `{"type":"eviction.started","id":"01…",…}`.
 */
export type EventJson = { readonly type: EventType } & JsonObject;

export function eventToJson(event: Event): EventJson {
  const json = toJson(EventSchema, event) as JsonObject;
  return { type: eventTypeOf(event), ...json };
}
