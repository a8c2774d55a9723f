import { create } from "@bufbuild/protobuf";
import type { InferenceService} from "@warden/proto";
import { Backend, PredictOptionsSchema, type PredictOptions } from "@warden/proto";
import type { RawUnaryHandler, ServiceImpl } from "@warden/grpc";
import { Code, WardenError, checkIdentifier, codeName, type Logger } from "@warden/common";
import type { Lease, Loader } from "@warden/loader";
import type { BackendClientHandle } from "./backend-connector.js";
import { predictResponseBytes, splitPredictRequest } from "./predict-bytes.js";

function options(model: string, o: PredictOptions | undefined): PredictOptions {
  // ModelIdentity is ours to set: the guard against a recycled port.
  // The request message is decoded per call and owned by this handler: set the
  // field in place rather than cloning (a reflective clone costs per call).
  const out = o ?? create(PredictOptionsSchema);
  out.ModelIdentity = model;
  return out;
}

function checkModel(model: string): void {
  checkIdentifier("model", model);
}

/**
 * InferenceService: loads on demand, routes with ModelIdentity set, and tracks
 * every call from start to its last reply, error, deadline or cancel (the
 * lease completes in `finally`, so a cancelled stream never strands an
 * in-flight count). UNAVAILABLE from a backend means the process is gone: it
 * is removed through the normal path and the call is retried once on a fresh
 * instance. DEADLINE_EXCEEDED does not mean dead.
 */
export function inferenceService(loader: Loader<BackendClientHandle>, log: Logger, routed: { inc(outcome: string): void } = { inc() {} }): ServiceImpl<typeof InferenceService> & { predictBytes: RawUnaryHandler } {
  const outcomeOf = (err: unknown): string => (err === undefined ? "ok" : codeName(WardenError.from(err).code));
  async function withLease<T>(model: string, signal: AbortSignal, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const lease = await loader.acquire(model, signal);
      try {
        return await fn(lease);
      } catch (err) {
        const e = WardenError.from(err);
        if (e.code === Code.Unavailable && !signal.aborted) {
          if (loader.isBeingStopped(lease.incarnation)) {
            // The instance was evicted while the call ran: that explains the
            // failure; no retry (it would load the model straight back).
            throw new WardenError(Code.Unavailable, `model "${model}" was evicted while the call ran: ${e.rawMessage}`);
          }
          log.warn("backend unavailable; removing it", { model, incarnation: lease.incarnation, address: lease.address });
          lease.complete();
          await loader.reportUnavailable(lease.incarnation).catch(() => undefined);
          if (attempt === 0 && mayRetry()) continue;
        }
        throw e;
      } finally {
        lease.complete();
      }
    }
  }

  async function track<T>(p: Promise<T>): Promise<T> {
    try {
      const v = await p;
      routed.inc("ok");
      return v;
    } catch (err) {
      routed.inc(outcomeOf(err));
      throw err;
    }
  }

  return {
    // The data-plane listener's Predict: same lease, tracking and retry, on bytes (see predict-bytes.ts).
    async predictBytes(bytes, ctx) {
      const { model, backendRequest } = splitPredictRequest(bytes);
      checkModel(model);
      return track(withLease(
        model,
        ctx.signal,
        async (lease) => predictResponseBytes(await lease.backend.client.unaryBytes(Backend.method.predict, backendRequest, { signal: ctx.signal, ...(ctx.deadlineAtMs === undefined ? {} : { deadlineAtMs: ctx.deadlineAtMs }) }), lease.nodeId),
        () => true,
      ));
    },
    async predict(req, ctx) {
      checkModel(req.model);
      return track(withLease(
        req.model,
        ctx.signal,
        async (lease) => {
          const reply = await lease.backend.client.predict(options(req.model, req.options), { signal: ctx.signal, ...(ctx.deadlineAtMs === undefined ? {} : { deadlineAtMs: ctx.deadlineAtMs }) });
          return { reply, nodeId: lease.nodeId };
        },
        () => true,
      ));
    },
    async *predictStream(req, ctx) {
      checkModel(req.model);
      let sent = 0;
      // Collect through a channel so retries stay possible until the first reply reached the caller.
      for (let attempt = 0; ; attempt++) {
        const lease = await loader.acquire(req.model, ctx.signal);
        try {
          for await (const reply of lease.backend.client.predictStream(options(req.model, req.options), { signal: ctx.signal, ...(ctx.deadlineAtMs === undefined ? {} : { deadlineAtMs: ctx.deadlineAtMs }) })) {
            sent++;
            yield { reply };
          }
          routed.inc("ok");
          return;
        } catch (err) {
          const e = WardenError.from(err);
          if (e.code === Code.Unavailable && !ctx.signal.aborted) {
            if (loader.isBeingStopped(lease.incarnation)) throw new WardenError(Code.Unavailable, `model "${req.model}" was evicted while the call ran: ${e.rawMessage}`);
            lease.complete();
            await loader.reportUnavailable(lease.incarnation).catch(() => undefined);
            if (attempt === 0 && sent === 0) continue;
          }
          routed.inc(outcomeOf(e));
          throw e;
        } finally {
          lease.complete();
        }
      }
    },
  };
}
