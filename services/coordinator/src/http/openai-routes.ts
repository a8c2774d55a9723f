import type { FastifyInstance } from "fastify";
import { fastifyMultipart } from "@fastify/multipart";
import { Code, WardenError } from "@warden/common";
import type { CoordinatorHttpContext } from "./coordinator-http.js";
import type { HttpRouteRegistrar } from "./http-server.js";
import { OpenAiBackend } from "./openai-backend.js";
import { registerChatRoutes } from "./openai-chat.js";
import { registerMediaRoutes } from "./openai-media.js";
import { ModelFirstSeen, listOpenAiModels } from "./openai-models.js";
import { openAiBounds } from "./openai-schema.js";

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
  const firstSeen = new ModelFirstSeen(() => ctx.clock.wallNow());
  const created = (id: string): number => firstSeen.of(id);
  // The models configured at start were first seen now.
  for (const m of ctx.loader.modelSpecs()) firstSeen.of(m.id);
  return async (app: FastifyInstance) => {
    // Audio uploads (transcriptions): one file, up to the body limit.
    await app.register(fastifyMultipart, { limits: { fileSize: ctx.config().http.bodyLimitBytes, files: 1 } });
    app.get("/v1/models", async (request) => {
      const p = ctx.auth.requireInference(request);
      const all = listOpenAiModels(ctx.loader, ctx.clock.now(), created);
      firstSeen.retain(new Set(all.data.map((m) => m.id)));
      // A token for some models sees those only.
      return p?.models === undefined ? all : { ...all, data: all.data.filter((m) => p.models?.has(m.id) === true) };
    });
    // A wildcard, not `:model`: an id with a `/` (org/name, never a Warden id) is an unknown model, not an unknown route.
    app.get("/v1/models/*", async (request) => {
      const p = ctx.auth.requireInference(request);
      const id = (request.params as { "*"?: string })["*"] ?? "";
      // As the list: a model this token may not use is not there for it (OpenAI: "does not exist or you do not have access").
      const visible = id.length <= openAiBounds.modelChars && ctx.loader.modelSpec(id) !== undefined && (p?.models === undefined || p.models.has(id));
      const m = visible ? listOpenAiModels(ctx.loader, ctx.clock.now(), created, id).data[0] : undefined;
      if (m === undefined) throw new WardenError(Code.NotFound, `model: ${JSON.stringify(id.slice(0, openAiBounds.modelChars))} is not configured (GET /v1/models lists the models)`, { details: { field: "model" } });
      return m;
    });
    registerChatRoutes(app, ctx, backend);
    registerMediaRoutes(app, ctx, backend);
  };
}
