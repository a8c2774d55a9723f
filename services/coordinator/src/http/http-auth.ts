import type { FastifyRequest } from "fastify";
import { Code, WardenError, type Logger } from "@warden/common";
import { maxAuthorizationChars } from "@warden/grpc";
import type { Authenticator } from "../auth/authenticator.js";
import type { Principal, Role } from "../auth/token-table.js";

const rank: Readonly<Record<Role, number>> = { viewer: 1, operator: 2, admin: 3, inference: 0, node: 0 };

/** The token of `Authorization: Bearer <token>`, or undefined (absent, another scheme, too long). */
export function bearerOf(request: FastifyRequest): string | undefined {
  const v = request.headers.authorization;
  if (typeof v !== "string" || v.length > maxAuthorizationChars || !v.startsWith("Bearer ")) return undefined;
  const t = v.slice("Bearer ".length).trim();
  return t === "" ? undefined : t;
}

const requestModels = new WeakMap<FastifyRequest, string>();

/** The model an admitted inference call named (checkModel): re-checked when a reload narrows its token (route-roles.ts). */
export function requestModelOf(request: FastifyRequest): string | undefined {
  return requestModels.get(request);
}

/**
 * The HTTP listener's token checks, over the same tokens file and roles as
 * the gRPC services (authenticator.ts). With auth off (no tokens file) every
 * check passes, as on gRPC. Refusals are logged at warn with the peer, the
 * route, the role and the token's name, never the token; they are 401
 * (no or unknown token) or 403 (a role or model the token does not allow).
 */
export class HttpAuth {
  constructor(
    private readonly authn: Authenticator | undefined,
    private readonly log: Logger,
  ) {}

  /** True when the coordinator has a tokens file. */
  get enabled(): boolean {
    return this.authn !== undefined;
  }

  private deny(code: Code, message: string, request: FastifyRequest, p: Principal | undefined, field?: string): WardenError {
    this.log.warn("http call refused", { peer: request.ip, route: `${request.method} ${request.routeOptions.url ?? ""}`, role: p?.role ?? "none", caller: p?.name ?? "unauthenticated", reason: message });
    return new WardenError(code, message, field === undefined ? {} : { details: { field } });
  }

  /** The caller's principal; throws 401 without a known token. undefined when auth is off. */
  principal(request: FastifyRequest): Principal | undefined {
    if (this.authn === undefined) return undefined;
    const token = bearerOf(request);
    if (token === undefined) throw this.deny(Code.Unauthenticated, "a bearer token is required (header Authorization: Bearer <token>)", request, undefined);
    const p = this.authn.principalOfToken(token);
    if (p === undefined) throw this.deny(Code.Unauthenticated, "unknown token", request, undefined);
    return p;
  }

  /** The OpenAI API: an inference (or admin) token; `models=` tokens only for their models. */
  requireInference(request: FastifyRequest, model?: string): Principal | undefined {
    const p = this.principal(request);
    if (p === undefined) return undefined;
    if (p.role !== "inference" && p.role !== "admin") throw this.deny(Code.PermissionDenied, `role ${p.role} may not call the inference API (needs an inference token)`, request, p);
    if (model !== undefined) this.checkModel(request, p, model);
    return p;
  }

  /** A model named by an admitted inference call: refused when the token lists others only. */
  checkModel(request: FastifyRequest, p: Principal | undefined, model: string): void {
    requestModels.set(request, model);
    if (p?.models !== undefined && !p.models.has(model)) throw this.deny(Code.PermissionDenied, `model: this token may not call model ${JSON.stringify(model.slice(0, 128))}`, request, p, "model");
  }

  /** Admin-side HTTP routes (the dashboard): viewer < operator < admin, as AdminService. */
  requireRole(request: FastifyRequest, need: "viewer" | "operator" | "admin"): Principal | undefined {
    const p = this.principal(request);
    if (p === undefined) return undefined;
    if (rank[p.role] < rank[need]) throw this.deny(Code.PermissionDenied, `role ${p.role} may not do this (needs ${need}${need === "admin" ? "" : " or above"})`, request, p);
    return p;
  }
}
