// Public entry of the generated contracts. Generated files under ./gen are never
// edited by hand: change proto/ and run `npm run proto:generate`.
export * from "./gen/warden/v1/types_pb.js";
export * from "./gen/warden/v1/agent_pb.js";
export * from "./gen/warden/v1/node_pb.js";
export * from "./gen/warden/v1/admin_pb.js";
export * from "./gen/warden/v1/inference_pb.js";
export * from "./gen/warden/v1/events_pb.js";
export * from "./gen/warden/v1/load_job_pb.js";
export * from "./gen/warden/v1/peer_pb.js";
export * from "./gen/backend/backend_pb.js";
export * from "./gen/grpc/health/v1/health_pb.js";
export * from "./gen/grpc/reflection/v1/reflection_pb.js";
export * as reflectionV1alpha from "./gen/grpc/reflection/v1alpha/reflection_pb.js";
export * from "./inventory-digest.js";
export * from "./state-names.js";
