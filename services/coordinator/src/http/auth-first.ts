import type { Socket } from "node:net";
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

/** A public route asked for with no body: one that comes with a body needs a token like any other request (body limit 0 until authenticated). */
function isPublic(request: FastifyRequest): boolean {
  if (request.method !== "GET" && request.method !== "HEAD") return false;
  const h = request.headers;
  if (h["transfer-encoding"] !== undefined || (h["content-length"] !== undefined && h["content-length"] !== "0")) return false;
  return publicHttpRoutes.has(request.url.split("?")[0] ?? "");
}

/**
 * Checks the token before anything else happens to a request (fastify's
 * onRequest stage: only the headers have been read). Without a known token
 * the answer is 401 with `Connection: close` and the body never buffered, so
 * an unauthenticated peer cannot make the coordinator hold an upload; what it
 * still sends is dropped for at most `refusedLingerMs`, then the connection
 * is closed. Roles and model scoping stay with each
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
        lingerOnClose(request.raw.socket);
        return reply.code(401).header("connection", "close").header("cache-control", "no-store").type("application/json").send(body);
      }
    });
  };
}
