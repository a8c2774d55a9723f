export * from "./admission-types.js";
export * from "./admission-queue.js";
export * from "./fair-share-bound.js";
