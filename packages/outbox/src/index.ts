export * from "./journal-record.js";
export * from "./journal-port.js";
export * from "./publisher-port.js";
export * from "./reduce-journal.js";
export * from "./outbox.js";
