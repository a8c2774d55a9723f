import type { FastifyInstance } from "fastify";
import type { CoordinatorHttpContext } from "./coordinator-http.js";
import type { HttpRouteRegistrar } from "./http-server.js";
import { listOpenAiModels } from "./openai-models.js";

/**
 * The OpenAI-compatible API under /v1: every call passes the inference
 * token check first (auth on), then its body is validated whole, then it is
 * routed through the loader exactly as the gRPC Inference and Backend
 * services route (routed-call.ts): load on demand, a lease per attempt,
 * in-flight counted to the last byte, the client's disconnect cancelling
 * the backend call.
 */
export function openAiRoutes(ctx: CoordinatorHttpContext): HttpRouteRegistrar {
  return (app: FastifyInstance) => {
    app.get("/v1/models", async (request) => {
      ctx.auth.requireInference(request);
      return listOpenAiModels(ctx.loader);
    });
  };
}
