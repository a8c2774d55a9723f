import type { FastifyInstance, FastifyRequest } from "fastify";
import type { AdminService } from "@warden/proto";
import type { Client } from "@warden/grpc";
import { invalidArgument } from "@warden/common";
import { memoryReading } from "../../nodes/node-registry.js";
import { callSignal } from "../http-server.js";
import type { DashboardContext } from "./dashboard-routes.js";
import { MetricsRing, type NodeMemorySample } from "./metrics-ring.js";
import { maxInstanceLogLines } from "../../admin/instance-logs.js";

/** The agent's memory reading of a node: what its GPUs hold, or its host's used RAM without GPUs. */
function measuredBytes(r: Parameters<typeof memoryReading>[0] | undefined): number {
  if (r === undefined) return 0;
  const m = memoryReading(r);
  return m.gpus.length > 0 ? m.gpus.reduce((a, g) => a + g.usedBytes, 0) : (m.ram?.usedBytes ?? 0);
}

/**
 * The console's routes for looking closer (their roles: route-roles.ts):
 * - GET /api/dashboard/logs?incarnation=&lines= — GetInstanceLogs (operator):
 *   the last `lines` (1..1000, default 100) of the backend's stdout and stderr;
 * - GET /api/dashboard/metrics — the metrics ring's samples (viewer), for the plots.
 * The ring samples from the listener's start to its close, whether or not a page looks.
 */
export function insightRoutes(app: FastifyInstance, ctx: DashboardContext, admin: Client<typeof AdminService>, onlyQuery: (request: FastifyRequest, allowed: readonly string[]) => Record<string, string>): void {
  const gate = ctx.gate;
  const ring = new MetricsRing(
    ctx.clock,
    (want) => {
      const out: NodeMemorySample[] = [];
      for (const n of ctx.nodes.list()) {
        if (!want(n.nodeId)) continue;
        const gpus = n.resources === undefined ? [] : memoryReading(n.resources).gpus;
        out.push({ nodeId: n.nodeId, measuredBytes: measuredBytes(n.resources), accountedBytes: ctx.loader.core.placementSummary(n.nodeId, "", []).accountedBytes, gpus });
      }
      return out;
    },
    {},
    // Calls waiting in each model's admission queue, every class (the warden_admission_waiting gauge's figures).
    () => (gate === undefined ? [] : Array.from(gate.depths(), (d) => ({ model: d.model, waiting: d.waiting.critical + d.waiting.standard + d.waiting.sheddable }))),
  ).start();
  const unlisten = ctx.calls?.listen(ring.onCall);
  const unlistenTokens = ctx.calls?.listenTokens(ring.onTokens);
  app.addHook("onClose", async () => {
    ring.stop();
    unlisten?.();
    unlistenTokens?.();
  });

  app.get("/api/dashboard/logs", async (request, reply) => {
    const q = onlyQuery(request, ["incarnation", "lines"]);
    let maxLines = 100;
    if (q.lines !== undefined) {
      if (!/^[0-9]{1,4}$/.test(q.lines) || Number(q.lines) < 1 || Number(q.lines) > maxInstanceLogLines) throw invalidArgument("lines", `a whole number 1..${String(maxInstanceLogLines)}, got "${q.lines.slice(0, 32)}"`);
      maxLines = Number(q.lines);
    }
    const r = await admin.getInstanceLogs({ incarnation: q.incarnation ?? "", maxLines }, { signal: callSignal(reply, ctx.config().http.callTimeoutMs) });
    return reply.header("cache-control", "no-store").send({ incarnation: q.incarnation, model: r.model, nodeId: r.nodeId, stdout: r.stdoutLines, stderr: r.stderrLines });
  });

  app.get("/api/dashboard/metrics", async (request, reply) => {
    onlyQuery(request, []);
    ctx.auth.principal(request);
    return reply.header("cache-control", "no-store").send(ring.toJson());
  });
}
