export * from "./sim-knobs.js";
export * from "./sim-args.js";
export * from "./backend-sim-service.js";
export * from "./sim-modalities.js";
