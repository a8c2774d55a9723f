export * from "./types.js";
export * from "./codes.js";
export * from "./limits.js";
export * from "./service-definition.js";
export * from "./client.js";
export * from "./server.js";
export * from "./health.js";
export { ReflectionIndex } from "./reflection.js";
export { inProcessClient } from "./in-process-client.js";
