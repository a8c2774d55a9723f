import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { Code, WardenError, type Logger } from "@warden/common";
import { adminRoleFor, roleReaches, type Authenticator } from "../auth/authenticator.js";
import type { Principal } from "../auth/token-table.js";
import { errorReply } from "./dashboard/dashboard-actions.js";
import { sseFrame } from "./dashboard/sse-clients.js";
import { bearerOf, requestModelOf, type HttpAuth } from "./http-auth.js";
import type { HttpRouteRegistrar } from "./http-server.js";

/**
 * Who may call an HTTP route, in the gRPC API's own terms, so the two
 * listeners cannot drift apart:
 * - `public`: no token (the dashboard page's static files, the load balancer's readiness check);
 * - `token`: any valid token (whoami: it tells the caller only its own role and name);
 * - `admin`: the AdminService methods whose data it reads or which it calls;
 *   `all` needs the highest of their roles (adminRoleFor), `any` the lowest
 *   (the handler then checks the one it runs);
 * - `inference`: InferenceService's rule (inference or admin tokens; a
 *   `models=` token only for its models, checked where the model is read).
 */
export type HttpRouteRule =
  | { readonly t: "public" }
  | { readonly t: "token" }
  | { readonly t: "admin"; readonly methods: readonly string[]; readonly of: "all" | "any"; readonly events?: true }
  | { readonly t: "inference" };

const open: HttpRouteRule = { t: "public" };
const inference: HttpRouteRule = { t: "inference" };

/**
 * Every route on the HTTP listener, `METHOD url` as fastify registers it
 * (HEAD follows its GET). A route missing here needs `admin` (as an
 * AdminService method missing from adminMethodRoles does): a new route is
 * closed until someone decides who may call it.
 */
export const httpRouteRules: Readonly<Record<string, HttpRouteRule>> = Object.freeze({
  "GET /": open,
  "GET /dashboard/app.css": open,
  "GET /dashboard/app.js": open,
  "GET /ha/leader": open,
  "GET /favicon.ico": open,
  "GET /api/dashboard/whoami": { t: "token" },
  "GET /api/dashboard/snapshot": { t: "admin", methods: ["ListNodes", "ListModels"], of: "all" },
  "GET /api/dashboard/nodes": { t: "admin", methods: ["ListNodes"], of: "all" },
  "GET /api/dashboard/models": { t: "admin", methods: ["ListModels"], of: "all" },
  "GET /api/dashboard/explain": { t: "admin", methods: ["ExplainPlacement"], of: "all" },
  "GET /api/dashboard/stream": { t: "admin", methods: ["WatchEvents", "ListNodes", "ListModels"], of: "all", events: true },
  "GET /api/dashboard/ha": { t: "admin", methods: ["GetHaStatus"], of: "all" },
  "POST /api/dashboard/actions/:action": { t: "admin", methods: ["LoadModel", "UnloadModel", "DrainNode", "UndrainNode", "ScaleModel"], of: "any" },
  "GET /api/dashboard/events": { t: "admin", methods: ["WatchEvents"], of: "all" },
  "GET /api/dashboard/policy": { t: "admin", methods: ["GetPolicy"], of: "all" },
  "POST /api/dashboard/policy": { t: "admin", methods: ["UpdatePolicy"], of: "all" },
  "POST /api/dashboard/policy/sweep": { t: "admin", methods: ["UpdatePolicy"], of: "all" },
  "GET /api/dashboard/logs": { t: "admin", methods: ["GetInstanceLogs"], of: "all" },
  "GET /api/dashboard/metrics": { t: "admin", methods: ["ListNodes", "ListModels"], of: "all" },
  "GET /v1/models": inference,
  "GET /v1/models/*": inference,
  "POST /v1/chat/completions": inference,
  "POST /v1/completions": inference,
  "POST /v1/embeddings": inference,
  "POST /v1/audio/speech": inference,
  "POST /v1/audio/transcriptions": inference,
  "POST /v1/images/generations": inference,
});

const closedRule: HttpRouteRule = { t: "admin", methods: [], of: "all" };
const ladder = ["viewer", "operator", "admin"] as const;

/** The rule of `METHOD url` (HEAD as its GET; unlisted: admin only). */
export function httpRouteRule(method: string, url: string): HttpRouteRule {
  return httpRouteRules[`${method === "HEAD" ? "GET" : method} ${url}`] ?? closedRule;
}

/** The role an `admin` rule needs. */
export function adminRuleNeeds(rule: Extract<HttpRouteRule, { t: "admin" }>): "viewer" | "operator" | "admin" {
  if (rule.methods.length === 0) return "admin";
  const idx = rule.methods.map((m) => ladder.indexOf(adminRoleFor(m)));
  return ladder[rule.of === "all" ? Math.max(...idx) : Math.min(...idx)] ?? "admin";
}

/** Why `p` may not (or no longer) use a route under `rule`, or undefined when it may. `model`: the one an inference call named. */
export function refusalOf(rule: HttpRouteRule, p: Principal, model: string | undefined): WardenError | undefined {
  switch (rule.t) {
    case "public":
    case "token":
      return undefined;
    case "admin": {
      const need = adminRuleNeeds(rule);
      return roleReaches(p.role, need) ? undefined : new WardenError(Code.PermissionDenied, `role ${p.role} may not do this (needs ${need}${need === "admin" ? "" : " or above"})`);
    }
    case "inference":
      if (p.role !== "inference" && p.role !== "admin") return new WardenError(Code.PermissionDenied, `role ${p.role} may not call the inference API (needs an inference token)`);
      if (model !== undefined && p.models !== undefined && !p.models.has(model)) return new WardenError(Code.PermissionDenied, `model: this token may not call model ${JSON.stringify(model.slice(0, 128))}`, { details: { field: "model" } });
      return undefined;
  }
}

/** Ends a call whose token a reload revoked: an event stream with an `error` event, anything else by closing its connection (its call signal aborts the work). */
function endRevoked(reply: FastifyReply, rule: HttpRouteRule, why: WardenError): void {
  const res = reply.raw;
  if (res.headersSent && rule.t === "admin" && rule.events === true) {
    res.end(sseFrame("error", JSON.stringify(errorReply(why).body)));
    return;
  }
  res.destroy();
}

/**
 * The HTTP listener's route roles, checked when a request arrives (before
 * its body is read) from the table above, and held for as long as the call
 * runs: a tokens-file reload that revokes the token, or narrows it so the
 * route's rule refuses, ends the call at once (Authenticator.replace). Must
 * be the first registrar, so its hooks cover every route; logs the routes
 * it found and any without a rule.
 */
export function routeRoles(auth: HttpAuth, authn: Authenticator | undefined, log: Logger): HttpRouteRegistrar {
  return (app: FastifyInstance) => {
    const seen: string[] = [];
    app.addHook("onRoute", (r) => {
      for (const m of Array.isArray(r.method) ? r.method : [r.method]) if (m !== "HEAD") seen.push(`${m} ${r.url}`);
    });
    app.addHook("onReady", async () => {
      const unlisted = seen.filter((k) => httpRouteRules[k] === undefined);
      log.info("http routes", { routes: seen, ...(unlisted.length === 0 ? {} : { unlistedNeedAdmin: unlisted }) });
    });
    app.addHook("onRequest", async (request: FastifyRequest, reply: FastifyReply) => {
      const url = request.routeOptions.url;
      // No route: the not-found handler answers; nothing there to guard.
      if (url === undefined || !auth.enabled) return;
      const rule = httpRouteRule(request.method, url);
      if (rule.t === "public") return;
      let p: Principal | undefined;
      try {
        p = rule.t === "inference" ? auth.requireInference(request) : rule.t === "admin" ? auth.requireRole(request, adminRuleNeeds(rule)) : auth.principal(request);
      } catch (err) {
        // Dashboard JSON keeps the dashboard's error shape wherever its route is registered (/api/dashboard/ha is not in its scope).
        if (!url.startsWith("/api/dashboard/")) throw err;
        const { status, body } = errorReply(err);
        return reply.code(status).header("cache-control", "no-store").type("application/json").send(body);
      }
      const token = bearerOf(request);
      if (authn === undefined || p === undefined || token === undefined) return;
      const release = authn.hold(token, {
        what: `${request.method} ${url}`,
        caller: () => p.name,
        allows: (next) => refusalOf(rule, next, requestModelOf(request)),
        end: (why) => {
          endRevoked(reply, rule, why);
        },
      });
      reply.raw.once("close", release);
    });
  };
}
