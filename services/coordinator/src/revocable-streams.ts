import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import { bearerTokenOf, type HandlerContext, type ServiceImpl } from "@warden/grpc";
import { adminRoleFor, roleReaches, type Authenticator } from "./authenticator.js";
import type { Principal } from "./token-table.js";

/** Whether a server stream of `m` opened with `request` may go on under `p`: undefined = yes, else why not. */
export type StreamRule = (m: DescMethod, p: Principal, request: unknown) => WardenError | undefined;

/** AdminService streams (WatchEvents): the method's own role (adminRoleFor), as at admission. */
export const adminStreamRule: StreamRule = (m, p) => {
  const need = adminRoleFor(m.name);
  return roleReaches(p.role, need) ? undefined : new WardenError(Code.PermissionDenied, `role ${p.role} may no longer call ${m.parent.typeName}/${m.name} (needs ${need}${need === "admin" ? "" : " or above"})`);
};

/** InferenceService streams: an inference or admin token that still lists the request's model (when it lists any). */
export const inferenceStreamRule: StreamRule = (m, p, request) => {
  if (p.role !== "inference" && p.role !== "admin") return new WardenError(Code.PermissionDenied, `role ${p.role} may no longer call ${m.parent.typeName}/${m.name} (needs an inference token)`);
  const model = (request as { model?: unknown } | undefined)?.model;
  if (p.models !== undefined && typeof model === "string" && !p.models.has(model)) return new WardenError(Code.PermissionDenied, `model: this token may no longer call model ${JSON.stringify(model.slice(0, 128))}`, { details: { field: "model" } });
  return undefined;
};

type StreamHandler = (input: unknown, ctx: HandlerContext) => AsyncIterable<unknown>;

/**
 * `impl` with each server-streaming method held against its caller's token
 * (Authenticator.hold) for as long as it streams: a tokens-file reload that
 * drops the token, or narrows it so `rule` refuses, aborts the handler's
 * signal and ends the stream with that status (UNAUTHENTICATED or
 * PERMISSION_DENIED), not OK: a follower must not read a revoked stream's
 * end as a clean one. Put it inside the admission check (guarded), which
 * authenticates first; unary methods pass through unchanged.
 */
export function revocableStreams<T extends DescService>(svc: T, impl: ServiceImpl<T>, authn: Authenticator, rule: StreamRule): ServiceImpl<T> {
  const byName = impl as unknown as Record<string, StreamHandler | undefined>;
  const out: Record<string, StreamHandler> = {};
  for (const m of svc.methods) {
    const h = byName[m.localName];
    if (h === undefined || m.methodKind !== "server_streaming") continue;
    out[m.localName] = async function* (input, ctx) {
      const token = bearerTokenOf(ctx.metadata);
      if (token === undefined) {
        yield* h(input, ctx);
        return;
      }
      const revoke = new AbortController();
      const release = authn.hold(token, {
        what: `${m.parent.typeName}/${m.name}`,
        caller: authn.principalOf(ctx)?.name ?? "unknown",
        allows: (p) => rule(m, p, input),
        end: (why) => {
          revoke.abort(why);
        },
      });
      const inner: HandlerContext = { ...ctx, signal: AbortSignal.any([ctx.signal, revoke.signal]) };
      authn.carry(ctx, inner);
      const revoked = (): WardenError | undefined => (revoke.signal.aborted ? (revoke.signal.reason as WardenError) : undefined);
      try {
        for await (const item of h(input, inner)) {
          const why = revoked();
          if (why !== undefined) throw why;
          yield item;
        }
      } catch (err) {
        // The handler saw its signal abort and threw its own error: the revocation is the reason.
        throw revoked() ?? err;
      } finally {
        release();
      }
      const why = revoked();
      if (why !== undefined) throw why;
    };
  }
  return { ...impl, ...out } as ServiceImpl<T>;
}
