import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { readTlsMaterial } from "@warden/grpc";
import type { Logger } from "@warden/common";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import { loadCoordinatorAuth } from "../auth/coordinator-auth.js";
import { errorReply } from "../http/dashboard/dashboard-actions.js";
import { dashboardClientBundle } from "../http/dashboard/dashboard-client-bundle.js";
import { dashboardCsp, dashboardCss, dashboardHtml } from "../http/dashboard/dashboard-page.js";
import type { DashboardHa } from "../http/dashboard/dashboard-view.js";
import { HttpAuth } from "../http/http-auth.js";
import { startHttpServer, type HttpServer } from "../http/http-server.js";
import { leaderHeader, leaderUrlOf, sendNotLeader, withoutMembers } from "../http/ha-routes.js";

/** The query parameter a dashboard page adds when it left a member that stopped answering: never redirect back there. */
export const leftParam = "left";

function pathOf(request: FastifyRequest): string {
  return request.url.split("?")[0] ?? "";
}

function queryValue(request: FastifyRequest, key: string): string | undefined {
  const v = (request.query as Record<string, unknown> | undefined)?.[key];
  return typeof v === "string" ? v : undefined;
}

function page(reply: FastifyReply, type: string, body: string | Promise<string>): Promise<FastifyReply> | FastifyReply {
  void reply.header("x-content-type-options", "nosniff").header("content-security-policy", dashboardCsp).header("referrer-policy", "no-referrer").header("cache-control", "no-cache").type(type);
  return typeof body === "string" ? reply.send(body) : body.then((b) => reply.send(b));
}

/**
 * A standby's HTTP listener on `httpListen`: every request is answered, none
 * served. `GET /` redirects (307) to the leader's dashboard when a leader is
 * known (and is not the member the page just left, `?left=<holder>`);
 * otherwise it is a 503 with `Retry-After` whose body is the dashboard page,
 * which waits for a leader and follows it. The page's script and style are
 * served; `GET /api/dashboard/ha` says which member this is, who leads and
 * the members (a valid token first when auth is on, as every dashboard call);
 * `GET /ha/leader` is 503 (a load balancer's readiness check). Every other
 * request (OpenAI API, dashboard JSON and stream, actions) is a 503 with
 * `Retry-After: 1`, `Warden-Leader: <url>` when known, and a JSON error
 * naming it. Nothing is read from or written to the cluster here. Same TLS,
 * limits and tokens as the coordinator's own listener; bound from the start,
 * so a member whose HTTP port is taken never competes for the lease.
 */
export async function startStandbyHttp(o: { readonly config: CoordinatorConfig; readonly listen: string; readonly view: () => DashboardHa; readonly log: Logger }): Promise<HttpServer> {
  const c = o.config;
  const auth = new HttpAuth((await loadCoordinatorAuth(c.auth, [], o.log.child({ component: "auth" }))).authenticator, o.log.child({ component: "http-auth" }));
  const tls = c.tls === undefined ? undefined : readTlsMaterial(c.tls, "tls");
  const register = (app: FastifyInstance): void => {
    // Before any body is parsed: an upload of any content type is refused the same way.
    app.addHook("onRequest", async (request, reply) => {
      const path = pathOf(request);
      const v = o.view();
      const leaderUrl = leaderUrlOf(v);
      const get = request.method === "GET" || request.method === "HEAD";
      if (get && path === "/") {
        if (leaderUrl !== undefined && queryValue(request, leftParam) !== v.leader?.holder) return reply.code(307).header("location", `${leaderUrl}/`).header("cache-control", "no-store").send();
        void reply.code(503).header("retry-after", "1");
        return page(reply, "text/html; charset=utf-8", dashboardHtml);
      }
      if (get && path === "/dashboard/app.css") return page(reply, "text/css; charset=utf-8", dashboardCss);
      if (get && path === "/dashboard/app.js") return page(reply, "text/javascript; charset=utf-8", dashboardClientBundle());
      if (get && path === "/ha/leader") {
        if (leaderUrl !== undefined) void reply.header(leaderHeader, leaderUrl);
        return reply.code(503).header("retry-after", "1").header("cache-control", "no-store").send(withoutMembers(v));
      }
      if (path.startsWith("/api/dashboard/")) {
        // The dashboard's calls check the token first, as on the leader: a page without one is asked for it here.
        try {
          auth.principal(request);
        } catch (err) {
          const { status, body } = errorReply(err);
          return reply.code(status).header("cache-control", "no-store").send(body);
        }
        if (get && path === "/api/dashboard/ha") return reply.header("cache-control", "no-store").send(v);
      }
      return sendNotLeader(request, reply, leaderUrl);
    });
  };
  return startHttpServer({ listen: o.listen, limits: c.http, tls: tls === undefined ? undefined : { cert: tls.cert, key: tls.key }, insecure: c.insecure, checkHost: !auth.enabled, routes: [register], log: o.log });
}
