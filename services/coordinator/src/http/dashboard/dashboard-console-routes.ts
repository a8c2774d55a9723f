import type { FastifyInstance, FastifyRequest } from "fastify";
import type { AdminService } from "@warden/proto";
import type { Client } from "@warden/grpc";
import { Code, WardenError, invalidArgument } from "@warden/common";
import { eventToJson } from "@warden/events";
import { checkId } from "../../admin/check-id.js";
import { dashboardActorMetadata } from "../../admin/admin-actor.js";
import { callSignal } from "../http-server.js";
import type { DashboardContext } from "./dashboard-routes.js";
import { EventHistory, maxHistoryRead, type HistoryFilter } from "./event-history.js";
import { faviconIco } from "./favicon.js";
import { maxPolicyBodyBytes, parsePolicyPatch, policyJson } from "./policy-json.js";
import { maxSweepBodyBytes, parseSweepRequest, readTraceChunks, runSweep } from "./policy-sweep.js";

/** Types one history read may name (comma-separated `type=`). */
const maxHistoryTypes = 16;
const typePattern = /^[a-z][a-z0-9.-]{0,63}$/;

function historyFilterOf(q: Readonly<Record<string, string>>): { filter: HistoryFilter; limit: number } {
  const types = (q.type ?? "").split(",").filter((t) => t !== "");
  if (types.length > maxHistoryTypes) throw invalidArgument("type", `at most ${String(maxHistoryTypes)} types, got ${String(types.length)}`);
  for (const t of types) if (!typePattern.test(t)) throw invalidArgument("type", `"${t.slice(0, 64)}" is not an event type (lower case, dots; a prefix ends in ".")`);
  let limit = 200;
  if (q.limit !== undefined) {
    if (!/^[0-9]{1,4}$/.test(q.limit) || Number(q.limit) < 1 || Number(q.limit) > maxHistoryRead) throw invalidArgument("limit", `a whole number 1..${String(maxHistoryRead)}, got "${q.limit.slice(0, 32)}"`);
    limit = Number(q.limit);
  }
  return {
    filter: { ...(q.node === undefined || q.node === "" ? {} : { nodeId: checkId(q.node, "node") }), ...(q.model === undefined || q.model === "" ? {} : { model: checkId(q.model, "model") }), ...(types.length === 0 ? {} : { types }) },
    limit,
  };
}

/**
 * The console's routes beside the Nodes panel's (their roles: route-roles.ts):
 * - GET /favicon.ico;
 * - GET /api/dashboard/events?node=&model=&type=&limit= — the newest `limit`
 *   (1..500, default 200) of the last events this coordinator saw (EventHistory's
 *   ring, 2 000 events), oldest first; `type` comma-separated, exact or a prefix
 *   ending in "."; read as WatchEvents is (viewer);
 * - GET /api/dashboard/policy — GetPolicy (viewer);
 * - POST /api/dashboard/policy — UpdatePolicy with the page's scalar fields (its role);
 * - POST /api/dashboard/policy/sweep — a what-if sweep of this coordinator's
 *   trace (policy-sweep.ts; UpdatePolicy's role: it spends the coordinator's
 *   CPU; one at a time, at most 5 minutes).
 */
export function consoleRoutes(app: FastifyInstance, ctx: DashboardContext, admin: Client<typeof AdminService>, onlyQuery: (request: FastifyRequest, allowed: readonly string[]) => Record<string, string>): void {
  const history = new EventHistory();
  ctx.hub.observe((e) => {
    history.add(eventToJson(e));
  });

  app.get("/favicon.ico", async (_request, reply) => reply.type("image/x-icon").header("cache-control", "public, max-age=86400").send(faviconIco));

  app.get("/api/dashboard/events", async (request, reply) => {
    const q = onlyQuery(request, ["node", "model", "type", "limit"]);
    ctx.auth.principal(request);
    const { filter, limit } = historyFilterOf(q);
    return reply.header("cache-control", "no-store").send({ events: history.read(filter, limit), capacity: history.capacity });
  });

  app.get("/api/dashboard/policy", async (request, reply) => {
    onlyQuery(request, []);
    ctx.auth.principal(request);
    const r = await admin.getPolicy({}, { signal: callSignal(reply, ctx.config().http.callTimeoutMs) });
    return reply.header("cache-control", "no-store").send(policyJson(r.policy));
  });

  app.post("/api/dashboard/policy", { bodyLimit: maxPolicyBodyBytes }, async (request, reply) => {
    onlyQuery(request, []);
    const patch = parsePolicyPatch(request.body);
    const r = await admin.updatePolicy({ patch }, { signal: callSignal(reply, ctx.config().http.callTimeoutMs), metadata: dashboardActorMetadata(ctx.auth.principal(request), request.ip) });
    return reply.header("cache-control", "no-store").send(policyJson(r.policy));
  });

  let sweeping = false;
  app.post("/api/dashboard/policy/sweep", { bodyLimit: maxSweepBodyBytes }, async (request, reply) => {
    onlyQuery(request, []);
    ctx.auth.principal(request);
    const req = parseSweepRequest(request.body);
    if (sweeping) throw new WardenError(Code.ResourceExhausted, "a sweep is already running on this coordinator; try again when it is done");
    sweeping = true;
    try {
      const signal = callSignal(reply, sweepDeadlineMs);
      const since = BigInt(Math.max(0, ctx.clock.wallNow() - req.windowMs));
      const lines = await readTraceChunks(admin.exportTrace({ sinceUnixMs: since }, { signal }));
      const result = await runSweep({ lines, config: ctx.config(), live: ctx.loader.getPolicy(), caps: ctx.loader.core.caps, request: req, signal, now: () => ctx.clock.now() });
      return await reply.header("cache-control", "no-store").send(result);
    } finally {
      sweeping = false;
    }
  });
}

/** The longest a dashboard sweep may run (`warden policy simulate` has no such bound). */
const sweepDeadlineMs = 300_000;
