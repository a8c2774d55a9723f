import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Code, WardenError } from "@warden/common";
import { errorReply } from "./dashboard/dashboard-actions.js";
import type { DashboardHa } from "./dashboard/dashboard-view.js";
import type { HttpAuth } from "./http-auth.js";
import type { HttpRouteRegistrar } from "./http-server.js";
import { errorBody } from "./openai-errors.js";

/** The response header naming the leader's HTTP base URL on a standby's refusals. */
export const leaderHeader = "warden-leader";

/** What a single coordinator (no `ha:`) says: it always serves. */
export const singleCoordinatorHa: DashboardHa = { enabled: false, members: [] };

/** What `GET /ha/leader` tells anyone (no token): this member and the leader, not the member list. */
export function withoutMembers(view: DashboardHa): DashboardHa {
  return { ...view, members: [] };
}

/** Whether `view`'s member serves the API: the leader, or a paused leader (no quorum: inference still routed). */
export function servesApi(view: DashboardHa): boolean {
  return !view.enabled || view.self?.role === "leader" || view.self?.role === "paused";
}

/** The leader's HTTP base URL as `view` knows it, when another member leads. */
export function leaderUrlOf(view: DashboardHa): string | undefined {
  const l = view.leader;
  return l === undefined || l.httpUrl === "" || l.holder === view.self?.holder ? undefined : l.httpUrl;
}

/** The refusal of an API call on a member that does not lead: UNAVAILABLE, naming the leader's HTTP URL when known. */
export function notLeaderHttpError(leaderUrl: string | undefined): WardenError {
  const where = leaderUrl === undefined ? "no leader is known yet; retry, or try another coordinator" : `the leader's HTTP API is at ${leaderUrl}`;
  return new WardenError(Code.Unavailable, `not the leader (this coordinator is a standby): ${where}`, { details: { reason: "not-leader", ...(leaderUrl === undefined ? {} : { leaderUrl }) } });
}

/**
 * Sends the 503 of a member that does not lead: `Retry-After: 1`, the
 * leader's URL in `Warden-Leader` (when known) and a JSON body in the
 * route's own error shape (the dashboard's under /api/dashboard/, OpenAI's elsewhere).
 */
export function sendNotLeader(request: FastifyRequest, reply: FastifyReply, leaderUrl: string | undefined): FastifyReply {
  const e = notLeaderHttpError(leaderUrl);
  const body = request.url.startsWith("/api/dashboard/") ? errorReply(e).body : errorBody(e);
  if (leaderUrl !== undefined) void reply.header(leaderHeader, leaderUrl);
  return reply.code(503).header("retry-after", "1").header("cache-control", "no-store").type("application/json").send(body);
}

/**
 * `GET /ha/leader`, the readiness check for a load balancer in front of every
 * member: 200 on the member that serves the API (the leader, paused or not;
 * a single coordinator), 503 with `Retry-After` elsewhere. No token needed:
 * the body names this member and the leader (what a standby's refusals name
 * anyway), not the member list. `GET /api/dashboard/ha`: the whole view, with
 * the members, for the dashboard (a viewer's token or above when auth is
 * on, as GetHaStatus: http/route-roles.ts).
 */
export function haRoutes(ctx: { readonly haView: (() => DashboardHa) | undefined; readonly auth: HttpAuth }): HttpRouteRegistrar {
  const view = (): DashboardHa => ctx.haView?.() ?? singleCoordinatorHa;
  return (app: FastifyInstance) => {
    app.get("/ha/leader", async (_request, reply) => {
      const v = view();
      if (servesApi(v)) return reply.header("cache-control", "no-store").send(withoutMembers(v));
      const url = leaderUrlOf(v);
      if (url !== undefined) void reply.header(leaderHeader, url);
      return reply.code(503).header("retry-after", "1").header("cache-control", "no-store").send(withoutMembers(v));
    });
    app.get("/api/dashboard/ha", async (request, reply) => {
      try {
        ctx.auth.principal(request);
      } catch (err) {
        const { status, body } = errorReply(err);
        return reply.code(status).header("cache-control", "no-store").send(body);
      }
      return reply.header("cache-control", "no-store").send(view());
    });
  };
}
