export * from "./errors.js";
export * from "./clock.js";
export * from "./rng.js";
export * from "./duration.js";
export * from "./ulid.js";
export * from "./logger.js";
export * from "./signals.js";
export * from "./backoff.js";
