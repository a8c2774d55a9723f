import type { FastifyInstance, FastifyRequest } from "fastify";
import { errorReply } from "./dashboard/dashboard-actions.js";
import type { HttpAuth } from "./http-auth.js";
import type { HttpRouteRegistrar } from "./http-server.js";
import { errorBody } from "./openai-errors.js";
import { WardenError } from "@warden/common";

/**
 * What anyone may fetch without a token: the dashboard's page, script and
 * style (the page then asks for a token) and the load balancer's readiness
 * check. All are GET with no body; every other request needs a known token.
 */
export const publicHttpRoutes: ReadonlySet<string> = new Set(["/", "/dashboard/app.css", "/dashboard/app.js", "/ha/leader"]);

function isPublic(request: FastifyRequest): boolean {
  if (request.method !== "GET" && request.method !== "HEAD") return false;
  return publicHttpRoutes.has(request.url.split("?")[0] ?? "");
}

/**
 * Checks the token before anything else happens to a request (fastify's
 * onRequest stage: only the headers have been read). Without a known token
 * the answer is 401 with `Connection: close` and the body never read, so an
 * unauthenticated peer cannot make the coordinator buffer an upload or keep
 * streaming into the connection. Roles and model scoping stay with each
 * route (HttpAuth.requireRole / requireInference). With auth off every
 * request passes, as on gRPC. Register first, so it covers every route and
 * the not-found handler.
 */
export function authenticateFirst(auth: HttpAuth): HttpRouteRegistrar {
  return (app: FastifyInstance) => {
    if (!auth.enabled) return;
    app.addHook("onRequest", async (request, reply) => {
      if (isPublic(request)) return;
      try {
        auth.principal(request);
      } catch (err) {
        const e = WardenError.from(err);
        // Each route family's own error shape: the dashboard's under /api/dashboard/, OpenAI's elsewhere.
        const body = request.url.startsWith("/api/dashboard/") ? errorReply(e).body : errorBody(e);
        return reply.code(401).header("connection", "close").header("cache-control", "no-store").type("application/json").send(body);
      }
    });
  };
}
