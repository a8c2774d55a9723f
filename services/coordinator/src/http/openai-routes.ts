import type { FastifyInstance } from "fastify";
import { fastifyMultipart } from "@fastify/multipart";
import type { CoordinatorHttpContext } from "./coordinator-http.js";
import type { HttpRouteRegistrar } from "./http-server.js";
import { OpenAiBackend } from "./openai-backend.js";
import { registerChatRoutes } from "./openai-chat.js";
import { registerMediaRoutes } from "./openai-media.js";
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
  const backend = new OpenAiBackend(ctx);
  return async (app: FastifyInstance) => {
    // Audio uploads (transcriptions): one file, up to the body limit.
    await app.register(fastifyMultipart, { limits: { fileSize: ctx.config().http.bodyLimitBytes, files: 1 } });
    app.get("/v1/models", async (request) => {
      const p = ctx.auth.requireInference(request);
      const all = listOpenAiModels(ctx.loader, ctx.clock.now());
      // A token for some models sees those only.
      return p?.models === undefined ? all : { ...all, data: all.data.filter((m) => p.models?.has(m.id) === true) };
    });
    registerChatRoutes(app, ctx, backend);
    registerMediaRoutes(app, ctx, backend);
  };
}
