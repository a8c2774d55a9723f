import type { DescMethod } from "@bufbuild/protobuf";
import { Code, WardenError, permissionDenied, type Logger } from "@warden/common";
import { bearerTokenOf, type CallCheck, type HandlerContext } from "@warden/grpc";
import { digestOfToken, type Principal, type Role, type TokenTable } from "./token-table.js";

/**
 * The least role each AdminService method needs. A method missing here needs
 * `admin`: a new method is closed until someone decides who may call it.
 */
export const adminMethodRoles: Readonly<Record<string, "viewer" | "operator">> = Object.freeze({
  ListNodes: "viewer",
  GetNode: "viewer",
  ListModels: "viewer",
  GetPolicy: "viewer",
  ExplainPlacement: "viewer",
  WatchEvents: "viewer",
  LoadModel: "operator",
  UnloadModel: "operator",
  DrainNode: "operator",
  UndrainNode: "operator",
  DeclareNodeLost: "operator",
  ForgetInstance: "operator",
  UpdatePolicy: "operator",
  ScaleModel: "operator",
  SetNodeLimits: "operator",
  GetHaStatus: "viewer",
  // A backend's output may hold what callers sent it: the role that acts on instances.
  GetInstanceLogs: "operator",
  ListBackendBundles: "viewer",
  InstallBackendBundle: "operator",
  RemoveBackendBundle: "operator",
});

const rank: Readonly<Record<Role, number>> = { viewer: 1, operator: 2, admin: 3, inference: 0, node: 0 };

/** The role an AdminService method needs. */
export function adminRoleFor(method: string): "viewer" | "operator" | "admin" {
  return adminMethodRoles[method] ?? "admin";
}

function methodName(m: DescMethod): string {
  return `${m.parent.typeName}/${m.name}`;
}

/** Whether an open stream may go on under a token's principal after a reload: undefined = yes, else why not. */
export type StreamAllows = (p: Principal) => WardenError | undefined;

/** A stream held against the token that opened it (hold, replace). Keeps the token's hash, never the token. */
interface HeldStream {
  readonly digest: string;
  readonly what: string;
  /** Read when the stream ends (the principal may be admitted after the hold, inside the handler). */
  readonly caller: () => string;
  readonly allows: StreamAllows;
  readonly end: (why: WardenError) => void;
}

/** Whether `role` reaches `need` on the viewer < operator < admin ladder (inference and node reach none of it). */
export function roleReaches(role: Role, need: "viewer" | "operator" | "admin"): boolean {
  return rank[role] >= rank[need];
}

/**
 * Bearer-token authentication and role checks for the coordinator's services
 * (the tokens file: token-table.ts). Each refusal is logged at warn with the
 * peer, the method, the caller's role (or "none") and the token's name —
 * never the token. The table is swapped whole on reload.
 */
export class Authenticator {
  /** The principal of each call that passed, for checks inside a handler (per-model inference). */
  private readonly principals = new WeakMap<HandlerContext, Principal>();
  /** The model each admitted inference call named (checkModel). */
  private readonly models = new WeakMap<HandlerContext, string>();

  constructor(
    private table: TokenTable,
    private readonly log: Logger,
  ) {}

  /** Open streams (WatchEvents, the dashboard's, inference streams): re-checked on every replace. */
  private readonly held = new Set<HeldStream>();

  /**
   * Replaces the tokens (SIGHUP). Unary calls already admitted finish with
   * their principal; every held stream whose token is gone (UNAUTHENTICATED)
   * or no longer allows it (its `allows`' PERMISSION_DENIED) is ended at once:
   * revoking a token must not leave its holder watching.
   */
  replace(table: TokenTable): void {
    this.table = table;
    for (const s of [...this.held]) {
      const p = table.lookupDigest(s.digest);
      const why = p === undefined ? new WardenError(Code.Unauthenticated, "this stream's token was revoked (the tokens file no longer lists it)") : s.allows(p);
      if (why === undefined) continue;
      this.held.delete(s);
      this.log.warn("stream ended: its token no longer allows it", { what: s.what, caller: s.caller(), role: p?.role ?? "none", code: why.code === Code.Unauthenticated ? "unauthenticated" : "permission_denied", reason: why.rawMessage });
      try {
        s.end(why);
      } catch (err) {
        // One stream failing to end must not keep the others open.
        this.log.warn("ending a revoked stream failed", { what: s.what, err: err instanceof Error ? err.message : String(err) });
      }
    }
  }

  /**
   * Holds an open stream against `token` until the returned release is
   * called: a replace that drops the token, or leaves it a principal that
   * `allows` refuses, calls `end` once with the reason.
   */
  hold(token: string, s: Omit<HeldStream, "digest">): () => void {
    const h: HeldStream = { ...s, digest: digestOfToken(token) };
    this.held.add(h);
    return () => {
      this.held.delete(h);
    };
  }

  /** Streams held now (tests, metrics). */
  get heldStreams(): number {
    return this.held.size;
  }

  /** Lets a handler that runs on a derived context (revocable-streams.ts) see the principal admitted on `from`. */
  carry(from: HandlerContext, to: HandlerContext): void {
    const p = this.principals.get(from);
    if (p !== undefined) this.principals.set(to, p);
  }

  get tokenCount(): number {
    return this.table.size;
  }

  /** The principal a presented token stands for (the HTTP listener's checks: http/http-auth.ts). */
  principalOfToken(token: string): Principal | undefined {
    return this.table.lookup(token);
  }

  /** The principal that `check` admitted for this call, if any. */
  principalOf(ctx: HandlerContext): Principal | undefined {
    return this.principals.get(ctx);
  }

  private deny(code: Code, message: string, m: DescMethod, ctx: HandlerContext, p: Principal | undefined, details?: Readonly<Record<string, unknown>>): WardenError {
    this.log.warn("call refused", { peer: ctx.peer, method: methodName(m), role: p?.role ?? "none", caller: p?.name ?? "unauthenticated", code: code === Code.Unauthenticated ? "unauthenticated" : "permission_denied", reason: message });
    return new WardenError(code, message, details === undefined ? {} : { details });
  }

  private authenticate(m: DescMethod, ctx: HandlerContext): Principal {
    const token = bearerTokenOf(ctx.metadata);
    if (token === undefined) throw this.deny(Code.Unauthenticated, "a bearer token is required (metadata authorization: Bearer <token>; the CLI reads WARDEN_TOKEN or --token-file)", m, ctx, undefined);
    const p = this.table.lookup(token);
    if (p === undefined) throw this.deny(Code.Unauthenticated, "unknown token", m, ctx, undefined);
    return p;
  }

  /** AdminService: viewer < operator < admin, per adminMethodRoles. */
  readonly admin: CallCheck = (m, ctx) => {
    const p = this.authenticate(m, ctx);
    const need = adminRoleFor(m.name);
    if (rank[p.role] < rank[need]) throw this.deny(Code.PermissionDenied, `role ${p.role} may not call ${methodName(m)} (needs ${need}${need === "admin" ? "" : " or above"})`, m, ctx, p);
    this.principals.set(ctx, p);
  };

  /** InferenceService: inference and admin tokens; a token's `models=` is checked in the handler (checkModel). */
  readonly inference: CallCheck = (m, ctx) => {
    const p = this.authenticate(m, ctx);
    if (p.role !== "inference" && p.role !== "admin") throw this.deny(Code.PermissionDenied, `role ${p.role} may not call ${methodName(m)} (needs an inference token)`, m, ctx, p);
    this.principals.set(ctx, p);
  };

  /** The model an admitted inference call named (checkModel): what a held stream is re-checked for. */
  modelOf(ctx: HandlerContext): string | undefined {
    return this.models.get(ctx);
  }

  /** A model named by an admitted inference call: refused when the caller's token lists others only. */
  checkModel(model: string, ctx: HandlerContext, m: DescMethod): void {
    this.models.set(ctx, model);
    const p = this.principals.get(ctx);
    if (p?.models !== undefined && !p.models.has(model)) throw this.deny(Code.PermissionDenied, `model: this token may not call model ${JSON.stringify(model.slice(0, 128))}`, m, ctx, p, { field: "model" });
  }

  /**
   * NodeService: node tokens only, each bound to its node id (the Kubernetes
   * node authorizer's rule): Register and Heartbeat for any other node id are
   * refused naming `node_id`. A stream of requests (HeartbeatStream) is
   * admitted on the token alone; its handler checks each message against the
   * token's node (principalOf(ctx).nodeId).
   */
  readonly node: CallCheck = (m, ctx, request) => {
    const p = this.authenticate(m, ctx);
    if (p.role !== "node" || p.nodeId === undefined) throw this.deny(Code.PermissionDenied, `role ${p.role} may not call ${methodName(m)} (needs a node token)`, m, ctx, p);
    if (m.methodKind === "bidi_streaming" || m.methodKind === "client_streaming") {
      this.principals.set(ctx, p);
      return;
    }
    const nodeId = (request as { nodeId?: unknown } | undefined)?.nodeId;
    if (nodeId !== p.nodeId) {
      const e = permissionDenied("node_id", `this token is bound to node "${p.nodeId}", not ${JSON.stringify(typeof nodeId === "string" ? nodeId.slice(0, 128) : "")}`);
      throw this.deny(e.code, e.rawMessage, m, ctx, p, e.details);
    }
    this.principals.set(ctx, p);
  };
}
