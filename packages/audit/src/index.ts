export * from "./nats-connection.js";
export * from "./audit-stream.js";
export * from "./audit-stream-check.js";
export * from "./nats-publisher.js";
export * from "./audit-subscriber.js";
export * from "./audit-link.js";
