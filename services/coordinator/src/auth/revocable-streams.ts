import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, WardenError } from "@warden/common";
import { bearerTokenOf, isPushReplies, pushedReplies, startReplies, type HandlerContext, type PushReplies, type RawServiceHandlers, type ServiceImpl } from "@warden/grpc";
import { adminRoleFor, roleReaches, type Authenticator } from "./authenticator.js";
import type { Principal } from "./token-table.js";

/** Whether a stream of `m` may go on under `p`: undefined = yes, else why not. `model`: the one it named, if any. */
export type StreamRule = (m: DescMethod, p: Principal, model: string | undefined) => WardenError | undefined;

/** AdminService streams (WatchEvents): the method's own role (adminRoleFor), as at admission. */
export const adminStreamRule: StreamRule = (m, p) => {
  const need = adminRoleFor(m.name);
  return roleReaches(p.role, need) ? undefined : new WardenError(Code.PermissionDenied, `role ${p.role} may no longer call ${m.parent.typeName}/${m.name} (needs ${need}${need === "admin" ? "" : " or above"})`);
};

/** Inference streams (InferenceService, backend.Backend): an inference or admin token that still lists the call's model (when it lists any). */
export const inferenceStreamRule: StreamRule = (m, p, model) => {
  if (p.role !== "inference" && p.role !== "admin") return new WardenError(Code.PermissionDenied, `role ${p.role} may no longer call ${m.parent.typeName}/${m.name} (needs an inference token)`);
  if (p.models !== undefined && model !== undefined && !p.models.has(model)) return new WardenError(Code.PermissionDenied, `model: this token may no longer call model ${JSON.stringify(model.slice(0, 128))}`, { details: { field: "model" } });
  return undefined;
};

/** NodeService streams (HeartbeatStream): a node token bound to the node the stream was opened for. */
export const nodeStreamRule: StreamRule = (m, p) => (p.role === "node" && p.nodeId !== undefined ? undefined : new WardenError(Code.PermissionDenied, `role ${p.role} may no longer call ${m.parent.typeName}/${m.name} (needs a node token)`));

/**
 * `ctx` with another signal. A proxy, not a copy: a server's context may be a
 * class whose getters and methods (the peer, its certificate) a spread would
 * lose; they run on the original.
 */
function withSignal(ctx: HandlerContext, signal: AbortSignal): HandlerContext {
  return new Proxy(ctx, {
    get(target, key) {
      if (key === "signal") return signal;
      const v: unknown = Reflect.get(target, key, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/**
 * Runs one stream held against its caller's token (Authenticator.hold): a
 * tokens-file reload that drops the token, or narrows it so `rule` refuses,
 * aborts the signal `run` streams under and ends the stream with that
 * status (UNAUTHENTICATED or PERMISSION_DENIED), not OK: a follower must not
 * read a revoked stream's end as a clean one. The hold starts when the
 * stream does (pulled or pushed) and ends with it. A pushed stream
 * (push-stream.ts) stays pushed; a pulled one is an iterator over the
 * handler's own, not an async generator around it: on a stream idle between
 * messages (a node's heartbeats) a generator's frames and promises wait the
 * whole while, per message, and outlive the young generation.
 */
function held<T>(authn: Authenticator, m: DescMethod, rule: StreamRule, ctx: HandlerContext, run: (ctx: HandlerContext) => AsyncIterable<T>): AsyncIterable<T> {
  const token = bearerTokenOf(ctx.metadata);
  // The admission check refuses it (or auth is off): nothing to hold.
  if (token === undefined) return run(ctx);
  const revoke = new AbortController();
  const inner = withSignal(ctx, AbortSignal.any([ctx.signal, revoke.signal]));
  authn.carry(ctx, inner);
  let release: (() => void) | undefined;
  const begin = (): void => {
    release = authn.hold(token, {
      what: `${m.parent.typeName}/${m.name}`,
      caller: () => authn.principalOf(inner)?.name ?? "unknown",
      allows: (p) => rule(m, p, authn.modelOf(inner)),
      end: (why) => {
        revoke.abort(why);
      },
    });
  };
  const finish = (): void => {
    release?.();
    release = undefined;
  };
  const revoked = (): WardenError | undefined => (revoke.signal.aborted ? (revoke.signal.reason as WardenError) : undefined);
  let replies: AsyncIterable<T>;
  try {
    replies = run(inner);
  } catch (err) {
    // A handler that throws as it is called fails its stream (the status), as one that throws when first read.
    return { [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(err instanceof Error ? err : WardenError.from(err)) }) };
  }
  if (isPushReplies(replies)) return heldPushed(replies, begin, finish, revoked);
  return {
    [Symbol.asyncIterator]: (): AsyncIterator<T> => {
      begin();
      let it: AsyncIterator<T>;
      try {
        it = replies[Symbol.asyncIterator]();
      } catch (err) {
        finish();
        throw err;
      }
      // Once per stream, not per message.
      const onResult = (r: IteratorResult<T>): IteratorResult<T> => {
        const why = revoked();
        if (why !== undefined || r.done === true) finish();
        if (why === undefined) return r;
        // Ended here, not by the handler: its own clean-up runs (as a for-await that throws would).
        if (r.done !== true) void it.return?.().catch(() => undefined);
        throw why;
      };
      const onError = (err: unknown): never => {
        finish();
        // The handler saw its signal abort and threw its own error: the revocation is the reason.
        throw revoked() ?? err;
      };
      return {
        next: () => it.next().then(onResult, onError),
        return: async (value?: unknown): Promise<IteratorResult<T>> => {
          finish();
          return (await it.return?.(value)) ?? { done: true, value: undefined as T };
        },
      };
    },
  };
}

/** `held` for a pushed stream: the same hold and the same ends, on the stream's events. */
function heldPushed<T>(replies: PushReplies<T>, begin: () => void, finish: () => void, revoked: () => WardenError | undefined): PushReplies<T> {
  return pushedReplies((sink) => {
    begin();
    startReplies(replies, {
      reply: (msg) => {
        const why = revoked();
        if (why === undefined) {
          sink.reply(msg);
          return;
        }
        finish();
        sink.fail(why);
      },
      end: () => {
        finish();
        const why = revoked();
        if (why === undefined) sink.end();
        else sink.fail(why);
      },
      fail: (err) => {
        finish();
        // The handler saw its signal abort and failed with its own error: the revocation is the reason.
        sink.fail(revoked() ?? err);
      },
    });
  });
}

type StreamHandler = (input: unknown, ctx: HandlerContext) => AsyncIterable<unknown>;

/**
 * `impl` with each server-streaming and bidi-streaming method held against
 * its caller's token for as long as it streams (held). Goes inside the
 * admission check (guarded), which authenticates first; unary methods pass
 * through.
 */
export function revocableStreams<T extends DescService>(svc: T, impl: ServiceImpl<T>, authn: Authenticator, rule: StreamRule): ServiceImpl<T> {
  const byName = impl as unknown as Record<string, StreamHandler | undefined>;
  const out: Record<string, StreamHandler> = {};
  for (const m of svc.methods) {
    const h = byName[m.localName];
    if (h === undefined || (m.methodKind !== "server_streaming" && m.methodKind !== "bidi_streaming")) continue;
    out[m.localName] = (input, ctx) => held(authn, m, rule, ctx, (c) => h(input, c));
  }
  return { ...impl, ...out } as ServiceImpl<T>;
}

/** The same for a raw service (LocalAI's backend.Backend pass-through): its server and bidi streams. */
export function revocableRawStreams(handlers: RawServiceHandlers, authn: Authenticator, rule: StreamRule): RawServiceHandlers {
  return {
    unary: (m) => handlers.unary(m),
    serverStream(m) {
      const h = handlers.serverStream(m);
      return (request, ctx) => held(authn, m, rule, ctx, (c) => h(request, c));
    },
    stream(m) {
      const h = handlers.stream(m);
      return (requests, ctx) => held(authn, m, rule, ctx, (c) => h(requests, c));
    },
  };
}
