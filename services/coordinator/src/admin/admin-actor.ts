import { Metadata } from "@grpc/grpc-js";
import type { Logger } from "@warden/common";
import { guardService, peerIdentity, type HandlerContext, type ServiceImpl } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { adminRoleFor, type Authenticator } from "../auth/authenticator.js";
import { adminService, type AdminDeps } from "./admin-service.js";
import type { Principal } from "../auth/token-table.js";

/** An actor longer than this is cut: token names and certificate CNs are short; the event must stay small. */
const maxActorLength = 256;

/**
 * Metadata by which the dashboard, calling the Admin API in process, says
 * whose button it runs. Read only from in-process calls: a remote caller's
 * metadata is its own word, its peer never "in-process".
 */
const dashboardActorKey = "x-warden-dashboard-actor";

/** Call metadata naming the dashboard user whose action runs: the token's name and role (auth on), and the browser's address. */
export function dashboardActorMetadata(p: Principal | undefined, remoteAddress: string): Metadata {
  const m = new Metadata();
  m.set(dashboardActorKey, `dashboard${p === undefined ? "" : `, token ${JSON.stringify(p.name)} (${p.role})`}, from ${remoteAddress}`.slice(0, maxActorLength));
  return m;
}

/**
 * Who made an Admin API call, as audit events and log lines name it: the
 * token's name and role when auth is on, the client certificate's CN under
 * mutual TLS (both when both), the dashboard user for the dashboard's
 * in-process calls (it checked the browser's token itself), else
 * `unauthenticated <peer>`.
 * Never the token itself.
 */
export function adminActorOf(authn: Authenticator | undefined, ctx: HandlerContext): string {
  const parts: string[] = [];
  const p = authn?.principalOf(ctx);
  if (p !== undefined) parts.push(`token ${JSON.stringify(p.name)} (${p.role})`);
  const cert = peerIdentity(ctx);
  if (cert !== undefined) parts.push(`certificate CN ${JSON.stringify(cert.commonName)}`);
  if (parts.length === 0 && ctx.peer === "in-process") {
    const dashboard = ctx.metadata.get(dashboardActorKey)[0];
    parts.push(typeof dashboard === "string" && dashboard !== "" ? dashboard : "in-process");
  }
  if (parts.length === 0) parts.push(`unauthenticated ${ctx.peer}`);
  return parts.join(", ").slice(0, maxActorLength);
}

/** The request fields worth an audit line (never tokens; the Admin API takes none in requests). */
function summary(input: unknown): Record<string, unknown> {
  if (typeof input !== "object" || input === null) return {};
  const r = input as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const k of ["model", "nodeId", "incarnation", "force", "reason", "operator"]) {
    const v = r[k];
    if (v !== undefined && v !== "") out[k] = typeof v === "string" ? v.slice(0, maxActorLength) : v;
  }
  return out;
}

/**
 * The AdminService with who asked recorded: LoadModel and UnloadModel stamp
 * the actor on the audit events of the load or stop they start (`actor`),
 * and every call that changes something (operator and admin methods) logs an
 * `admin command` line naming the actor before it runs. Runs inside the
 * authentication guard, so the token's principal is known.
 */
export function auditedAdminService(authn: Authenticator | undefined, log: Logger, deps: Omit<AdminDeps, "actorOf">): ServiceImpl<typeof AdminService> {
  const actorOf = (ctx: HandlerContext): string => adminActorOf(authn, ctx);
  return guardService(AdminService, adminService({ ...deps, actorOf }), (m, ctx, input) => {
    if (adminRoleFor(m.name) === "viewer") return;
    log.info("admin command", { method: m.name, actor: actorOf(ctx), peer: ctx.peer, ...summary(input) });
  });
}
