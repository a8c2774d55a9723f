export * from "./journal-record.js";
export * from "./journal-port.js";
export * from "./publisher-port.js";
export * from "./reduce-journal.js";
export * from "./outbox.js";
export * from "./outbox-types.js";
export * from "./event-priority.js";
// Re-exported so the journal and the publisher share one cached encoding per event.
export { encodeEvent, decodeEvent } from "@warden/events";
export * from "./epoch-fence.js";
export * from "./fenced-publisher.js";
