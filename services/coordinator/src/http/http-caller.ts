import type { FastifyRequest } from "fastify";
import type { Principal } from "../auth/token-table.js";
import type { CallerClass } from "../routing/admission-gate.js";
import { callerClass, priorityHeader } from "../routing/caller-class.js";
import type { CoordinatorHttpContext } from "./coordinator-http.js";

/** The class and fair-share principal of one OpenAI-route call: its token's, or lower per `X-Warden-Priority`. */
export function httpCaller(ctx: CoordinatorHttpContext, request: FastifyRequest, p: Principal | undefined): CallerClass {
  const h = request.headers[priorityHeader];
  return callerClass(p, ctx.auth.enabled, Array.isArray(h) ? h[0] : h, priorityHeader);
}
