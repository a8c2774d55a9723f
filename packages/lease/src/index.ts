export * from "./lease-config.js";
export * from "./lease-state.js";
export * from "./lease-core.js";
