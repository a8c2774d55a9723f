import type { Socket } from "node:net";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { errorReply } from "./dashboard/dashboard-actions.js";
import type { HttpAuth } from "./http-auth.js";
import type { HttpRouteRegistrar } from "./http-server.js";
import { errorBody } from "./openai-errors.js";
import { httpRouteRule } from "./route-roles.js";
import { WardenError } from "@warden/common";

/**
 * How long a refused connection keeps reading (and dropping) what the peer
 * still sends after the 401 went out. Closing at once with unread bytes
 * makes the kernel send a reset, and a client still writing its upload then
 * loses the 401 it had not read yet; this is the "lingering close" of other
 * HTTP servers. A peer that stops and closes ends it sooner.
 */
export const refusedLingerMs = 5_000;

/** …and at most this many bytes: room for what an honest client had in flight (socket buffers), not for a peer that keeps streaming. */
export const refusedLingerBytes = 16 * 1024 * 1024;

/** Replaces the close Node makes after a `Connection: close` reply (destroySoon) by a lingering one. */
function lingerOnClose(socket: Socket): void {
  socket.destroySoon = function lingeringClose(this: Socket): void {
    this.end();
    const timer = setTimeout(() => this.destroy(), refusedLingerMs);
    timer.unref();
    const readAtRefusal = this.bytesRead;
    const onData = (): void => {
      if (this.bytesRead - readAtRefusal > refusedLingerBytes) this.destroy();
    };
    this.on("data", onData);
    this.once("close", () => {
      clearTimeout(timer);
      this.off("data", onData);
    });
  };
}

/**
 * A route anyone may call (route-roles.ts: the dashboard's page, script and
 * style, the readiness check), asked for with no body: one that comes with a
 * body, or no route at all, needs a token like any other request (body limit
 * 0 until authenticated).
 */
function isPublic(request: FastifyRequest): boolean {
  const h = request.headers;
  if (h["transfer-encoding"] !== undefined || (h["content-length"] !== undefined && h["content-length"] !== "0")) return false;
  const url = request.routeOptions.url;
  return url !== undefined && httpRouteRule(request.method, url).t === "public";
}

/**
 * Checks the token before anything else happens to a request (fastify's
 * onRequest stage: only the headers have been read). Without a known token
 * the answer is 401 with `Connection: close` and the body never buffered, so
 * an unauthenticated peer cannot make the coordinator hold an upload; what it
 * still sends is dropped for at most `refusedLingerMs`, then the connection
 * is closed. Roles and model scoping come next (route-roles.ts, the
 * registrar after this one). With auth off every
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
        lingerOnClose(request.raw.socket);
        return reply.code(401).header("connection", "close").header("cache-control", "no-store").type("application/json").send(body);
      }
    });
  };
}
