export * from "./event-type.js";
export * from "./subject-token.js";
export * from "./event-subject.js";
export * from "./terminal.js";
export * from "./event-factory.js";
export * from "./event-codec.js";
export * from "./event-filter.js";
export * from "./recent-id-set.js";
