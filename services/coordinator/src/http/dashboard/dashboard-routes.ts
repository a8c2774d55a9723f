import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AdminService } from "@warden/proto";
import { inProcessClient } from "@warden/grpc";
import { Code, WardenError, capExceeded, invalidArgument } from "@warden/common";
import { adminRoleFor } from "../../auth/authenticator.js";
import { dashboardActorMetadata } from "../../admin/admin-actor.js";
import { checkId } from "../../admin/check-id.js";
import type { Principal } from "../../auth/token-table.js";
import type { CoordinatorHttpContext } from "../coordinator-http.js";
import { callSignal } from "../http-server.js";
import { errorReply, maxActionBodyBytes, parseAction, runAction, type DashboardAction } from "./dashboard-actions.js";
import { dashboardClientBundle } from "./dashboard-client-bundle.js";
import { DashboardFeed } from "./dashboard-feed.js";
import { dashboardCsp, dashboardCss, dashboardHtml } from "./dashboard-page.js";
import { explainJson, takeSnapshot } from "./dashboard-snapshot.js";
import { modelsPage, modelsQueryKeys, nodesPage, nodesQueryKeys } from "./dashboard-listing-routes.js";
import type { DashboardPermission, DashboardWhoAmI } from "./dashboard-view.js";
import { consoleRoutes } from "./dashboard-console-routes.js";
import { insightRoutes } from "./dashboard-insight-routes.js";
import { defaultSseLimits, type SseLimits } from "./sse-clients.js";

export type DashboardContext = Pick<CoordinatorHttpContext, "config" | "clock" | "loader" | "hub" | "admin" | "auth" | "log" | "calls" | "nodes" | "gate">;

export interface DashboardOptions {
  readonly sse?: SseLimits;
  /** See FeedOptions. */
  readonly refreshMs?: number;
}

const adminMethodOf: Readonly<Record<DashboardAction["t"], string>> = { load: "LoadModel", unload: "UnloadModel", drain: "DrainNode", undrain: "UndrainNode", scale: "ScaleModel" };
const rank: Readonly<Record<string, number>> = { viewer: 1, operator: 2, admin: 3 };

/** Whether `p` may call Admin API method `m` (auth off: anyone). */
function mayCall(p: Principal | undefined, m: string): boolean {
  return p === undefined || (rank[p.role] ?? 0) >= (rank[adminRoleFor(m)] ?? 4);
}

/** Whether `p` may press every button (each is the Admin API method's own role: adminRoleFor). */
function mayAct(p: Principal | undefined): boolean {
  return Object.values(adminMethodOf).every((m) => mayCall(p, m));
}

/** Per control, whether `p` may use it (the client shows only those). */
function mayEach(p: Principal | undefined): Record<DashboardPermission, boolean> {
  return { load: mayCall(p, "LoadModel"), unload: mayCall(p, "UnloadModel"), drain: mayCall(p, "DrainNode"), undrain: mayCall(p, "UndrainNode"), scale: mayCall(p, "ScaleModel"), policy: mayCall(p, "UpdatePolicy"), logs: mayCall(p, "GetInstanceLogs") };
}

function sendError(reply: FastifyReply, err: unknown): FastifyReply {
  const { status, body } = errorReply(err);
  return reply.code(status).header("cache-control", "no-store").type("application/json").send(body);
}

/** Query keys an endpoint takes: anything else is refused naming it, so a typo is not silently ignored. */
function onlyQuery(request: FastifyRequest, allowed: readonly string[]): Record<string, string> {
  const q = (request.query ?? {}) as Record<string, unknown>;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(q)) {
    if (!allowed.includes(k)) throw invalidArgument(k.slice(0, 64), `is not a query parameter here (allowed: ${allowed.length === 0 ? "none" : allowed.join(", ")})`);
    if (typeof v !== "string") throw invalidArgument(k.slice(0, 64), "must be given once");
    out[k] = v;
  }
  return out;
}

/**
 * The dashboard on the HTTP listener: the page at `/`, its bundled script and
 * style, and JSON under /api/dashboard/. With auth on, who may call each
 * route is http/route-roles.ts's table, checked before the handler runs:
 * reading (snapshot, stream, explain) takes the role of the Admin API methods
 * it shows (viewer), whoami any valid token; each button takes the role
 * its Admin API method takes (operator or admin) and runs that method's own
 * implementation, in process. Errors are `{ error: { code, message, field? } }`.
 */
export function dashboardRoutes(ctx: DashboardContext, options: DashboardOptions = {}): (app: FastifyInstance) => Promise<void> {
  return async (root) => {
    const admin = inProcessClient(AdminService, ctx.admin);
    const snapshot = (): ReturnType<typeof takeSnapshot> => takeSnapshot({ admin, accountedBytes: (nodeId) => ctx.loader.core.placementSummary(nodeId, "", []).accountedBytes, wallNowMs: () => ctx.clock.wallNow() });
    const feed = new DashboardFeed({ hub: ctx.hub, snapshot, clock: ctx.clock, log: ctx.log.child({ component: "dashboard" }), limits: options.sse ?? defaultSseLimits, ...(ctx.calls === undefined ? {} : { calls: ctx.calls }), ...(options.refreshMs === undefined ? {} : { refreshMs: options.refreshMs }) });
    // Its own scope: the dashboard's error shape, not the OpenAI one of the rest of the listener.
    await root.register(async (app) => {
      app.addHook("onClose", async () => {
        feed.close();
      });
      app.setErrorHandler((err, _request, reply) => sendError(reply, err));
      app.addHook("onSend", async (_request, reply, payload) => {
        reply.header("x-content-type-options", "nosniff");
        reply.header("content-security-policy", dashboardCsp);
        reply.header("referrer-policy", "no-referrer");
        return payload;
      });

      consoleRoutes(app, ctx, admin, onlyQuery);
      insightRoutes(app, ctx, admin, onlyQuery);
      app.get("/", async (_request, reply) => {
        // The page's stream follows in one script load: its first snapshot is taken meanwhile (bounded: one at a time).
        feed.prepare();
        return reply.type("text/html; charset=utf-8").header("cache-control", "no-cache").send(dashboardHtml);
      });
      app.get("/dashboard/app.css", async (_request, reply) => reply.type("text/css; charset=utf-8").header("cache-control", "no-cache").send(dashboardCss));
      app.get("/dashboard/app.js", async (_request, reply) => reply.type("text/javascript; charset=utf-8").header("cache-control", "no-cache").send(await dashboardClientBundle()));

      app.get("/api/dashboard/whoami", async (request, reply) => {
        onlyQuery(request, []);
        const p = ctx.auth.principal(request);
        const who: DashboardWhoAmI = { authOn: ctx.auth.enabled, role: p?.role ?? "", name: p?.name ?? "", canAct: mayAct(p), may: mayEach(p) };
        return reply.header("cache-control", "no-store").send(who);
      });

      app.get("/api/dashboard/snapshot", async (request, reply) => {
        onlyQuery(request, []);
        ctx.auth.principal(request);
        return reply.header("cache-control", "no-store").send(await snapshot());
      });

      // One page of ListNodes / ListModels each (dashboard-listing-routes.ts), for clients that page.
      app.get("/api/dashboard/nodes", async (request, reply) => {
        const q = onlyQuery(request, nodesQueryKeys);
        ctx.auth.principal(request);
        const accountedBytes = (nodeId: string): number => ctx.loader.core.placementSummary(nodeId, "", []).accountedBytes;
        return reply.header("cache-control", "no-store").send(await nodesPage(admin, accountedBytes, q, callSignal(reply, ctx.config().http.callTimeoutMs)));
      });
      app.get("/api/dashboard/models", async (request, reply) => {
        const q = onlyQuery(request, modelsQueryKeys);
        ctx.auth.principal(request);
        return reply.header("cache-control", "no-store").send(await modelsPage(admin, q, callSignal(reply, ctx.config().http.callTimeoutMs)));
      });

      app.get("/api/dashboard/explain", async (request, reply) => {
        const q = onlyQuery(request, ["model"]);
        ctx.auth.principal(request);
        const model = checkId(q.model ?? "", "model");
        const r = await admin.explainPlacement({ model }, { signal: callSignal(reply, ctx.config().http.callTimeoutMs) });
        return reply.header("cache-control", "no-store").send(explainJson(r, ctx.clock.wallNow()));
      });

      // GET only: a HEAD would take a stream slot whose headers Node never sends (no body, so never flushed).
      app.get("/api/dashboard/stream", { exposeHeadRoute: false }, async (request, reply) => {
        onlyQuery(request, []);
        const p = ctx.auth.principal(request);
        // The stream is written by the feed from here on, past fastify's reply.
        void reply.hijack();
        const res = reply.raw;
        const admitted = await feed.connect(res, p === undefined ? `address ${request.ip}` : `token ${p.name}`).catch((err: unknown) => {
          const { status, body } = errorReply(err);
          res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
          return undefined;
        });
        if (admitted?.t === "caller-full") {
          const { status, body } = errorReply(capExceeded("streams_per_caller", `this ${p === undefined ? "address" : "token"} has ${String(admitted.open)} dashboard event streams open (cap ${String(feed.clients.limits.maxClientsPerCaller ?? 0)} per caller); close one`));
          res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
        }
        if (admitted?.t === "full") {
          const { status, body } = errorReply(new WardenError(Code.Unavailable, `too many dashboard event streams open (${String(feed.clients.limits.maxClients)}); retry later`));
          res.writeHead(status, { "content-type": "application/json", "retry-after": "5" }).end(JSON.stringify(body));
        }
      });

      app.post<{ Params: { action: string } }>("/api/dashboard/actions/:action", { bodyLimit: maxActionBodyBytes }, async (request, reply) => {
        onlyQuery(request, []);
        ctx.auth.principal(request);
        const action = parseAction(request.params.action, request.body);
        ctx.auth.requireRole(request, adminRoleFor(adminMethodOf[action.t]));
        const result = await runAction(ctx.auth.principal(request)?.name ?? "dashboard", admin, action, { signal: callSignal(reply, ctx.config().http.callTimeoutMs), metadata: dashboardActorMetadata(ctx.auth.principal(request), request.ip) });
        return reply.header("cache-control", "no-store").send(result);
      });
    });
  };
}
