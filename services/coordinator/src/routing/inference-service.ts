import { create } from "@bufbuild/protobuf";
import type { DescMethod } from "@bufbuild/protobuf";
import { Backend, InferenceService, PredictOptionsSchema, type PredictOptions } from "@warden/proto";
import type { HandlerContext, RawUnaryHandler, ServiceImpl } from "@warden/grpc";
import { WardenError, checkIdentifier, type Logger } from "@warden/common";
import type { Loader } from "@warden/loader";
import type { BackendClientHandle } from "./backend-connector.js";
import { modelIdentity } from "./model-identity.js";
import { predictResponseBytes, replyTokens, splitPredictRequest } from "./predict-bytes.js";
import { promptOfOptions } from "./prompt-bytes.js";
import { RoutedCalls, outcomeTracker, type CallBytes, type RoutedCallObserver, type RoutedCounter } from "./routed-call.js";
import { prefixPromptChars, type PrefixRouting } from "./prefix-routing.js";
import type { RoutingAdmission } from "./admission-gate.js";

function options(identity: string, o: PredictOptions | undefined): PredictOptions {
  // ModelIdentity is ours to set: the guard against a recycled port.
  // The request message is decoded per call and owned by this handler: set the
  // field in place rather than cloning (a reflective clone costs per call).
  const out = o ?? create(PredictOptionsSchema);
  out.ModelIdentity = identity;
  return out;
}

function checkModel(model: string): void {
  checkIdentifier("model", model);
}

/**
 * InferenceService: loads on demand, routes with ModelIdentity set, and tracks
 * every call from start to its last reply, error, deadline or cancel (the
 * lease completes in `finally`, so a cancelled stream never strands an
 * in-flight count). UNAVAILABLE from a backend (the process is gone) or
 * NOT_FOUND "model identity mismatch" (a stale route) removes the instance
 * through the normal path and retries the call once on a fresh one (see
 * routed-call.ts). DEADLINE_EXCEEDED does not mean dead.
 */
export function inferenceService(
  loader: Loader<BackendClientHandle>,
  log: Logger,
  routed: RoutedCounter = { inc() {} },
  /** May the call's caller use this model (per-model inference tokens)? Throws to refuse; runs on the model as parsed here. */
  mayUse: (model: string, ctx: HandlerContext, method: DescMethod) => void = () => undefined,
  /** Prefix-affinity routing of Predict and PredictStream for models configured `routing: prefix` (the data-plane listener's Predict bytes too). */
  prefix?: PrefixRouting,
  /** Per-model admission (models with `admission:`); undefined = none. */
  admission?: RoutingAdmission,
  /** Told of every call when it ends (the workload trace). */
  observer?: RoutedCallObserver,
  /** Told of the completion tokens a call's backend reported (the dashboard's tokens per second); a throw is the listener's, never the call's. */
  onTokens?: (model: string, tokens: number) => void,
): ServiceImpl<typeof InferenceService> & { predictBytes: RawUnaryHandler } {
  const calls = new RoutedCalls(loader, log, admission?.gate, observer);

  const track = outcomeTracker(routed);
  const tokensOf = (model: string, tokens: number): void => {
    if (onTokens === undefined || tokens <= 0) return;
    try {
      onTokens(model, tokens);
    } catch {
      // The plot loses these tokens; the call is unharmed.
    }
  };

  return {
    // The data-plane listener's Predict: same lease, tracking and retry, on bytes (see predict-bytes.ts).
    // A prefix-routed model's prompt is read from the bytes (bounded, prompt-bytes.ts); other models pay one config lookup.
    // Promise chains rather than async functions: each async layer costs promise turns on every call.
    predictBytes(bytes, ctx) {
      let unary: Promise<Uint8Array>;
      try {
        const { model, backendRequest } = splitPredictRequest(bytes, (m) => modelIdentity(loader, m));
        checkModel(model);
        mayUse(model, ctx, InferenceService.method.predict);
        const size: CallBytes = { reqBytes: bytes.length };
        // The lean server's cancellation when it offers one: no AbortSignal is made for a call served at once.
        const cancel = ctx.cancel ?? ctx.signal;
        const deadlineAtMs = ctx.deadlineAtMs;
        // The call's own cancellation fires at its deadline: the backend call needs no timer of its own.
        const opts = deadlineAtMs === undefined ? { cancel } : { cancel, deadlineAtMs, cancelAtDeadline: ctx.cancel !== undefined };
        unary = calls.unary(
          model,
          cancel,
          (lease) =>
            lease.backend.client.unaryBytes(Backend.method.predict, backendRequest, opts).then((raw) => {
              if (onTokens !== undefined) tokensOf(model, replyTokens(raw));
              const reply = predictResponseBytes(raw, lease.nodeId);
              size.respBytes = reply.length;
              return reply;
            }),
          () => true,
          prefix?.hint(model, () => promptOfOptions(backendRequest, prefixPromptChars)),
          admission?.callerOf(ctx),
          size,
          // Counted by the routed call itself: one promise turn fewer than `track` per call.
          routed,
        );
      } catch (err) {
        // Refused before routing (bytes, model name, token, priority): not a routed call.
        return Promise.reject(WardenError.from(err));
      }
      return unary;
    },
    async predict(req, ctx) {
      checkModel(req.model);
      mayUse(req.model, ctx, InferenceService.method.predict);
      return track(calls.unary(
        req.model,
        ctx.signal,
        async (lease) => {
          const reply = await lease.backend.client.predict(options(modelIdentity(loader, req.model), req.options), { signal: ctx.signal, ...(ctx.deadlineAtMs === undefined ? {} : { deadlineAtMs: ctx.deadlineAtMs }) });
          tokensOf(req.model, reply.tokens);
          return { reply, nodeId: lease.nodeId };
        },
        () => true,
        prefix?.hint(req.model, () => req.options),
        admission?.callerOf(ctx),
      ));
    },
    async *predictStream(req, ctx) {
      checkModel(req.model);
      mayUse(req.model, ctx, InferenceService.method.predictStream);
      // Retries stay possible until the first reply reached the caller.
      // As the OpenAI routes count a stream: the latest count the backend reported, else the replies with text; told when it ends.
      let reported = 0;
      let withText = 0;
      try {
        for await (const reply of calls.stream(req.model, ctx.signal, (lease) => lease.backend.client.predictStream(options(modelIdentity(loader, req.model), req.options), { signal: ctx.signal, ...(ctx.deadlineAtMs === undefined ? {} : { deadlineAtMs: ctx.deadlineAtMs }) }), () => true, routed, undefined, prefix?.hint(req.model, () => req.options), admission?.callerOf(ctx))) {
          if (reply.tokens > 0) reported = reply.tokens;
          if (reply.message.length > 0) withText++;
          yield { reply };
        }
      } finally {
        tokensOf(req.model, reported > 0 ? reported : withText);
      }
    },
  };
}
