export * from "./admission-types.js";
export * from "./admission-queue.js";
