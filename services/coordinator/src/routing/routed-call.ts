import { Code, WardenError, codeName, type Logger } from "@warden/common";
import type { Lease, Loader, RouteHint } from "@warden/loader";
import type { BackendClientHandle } from "./backend-connector.js";
import { defaultCaller, type AdmissionGate, type CallerClass } from "./admission-gate.js";

/**
 * The marker upstream backends put in the NOT_FOUND they answer for a
 * request whose ModelIdentity is not the model they hold (LocalAI's
 * grpcerrors.ModelMismatchSentinel, the same in every language).
 */
export const modelMismatchSentinel = "model identity mismatch";

/**
 * The backend at this address holds another model: the route is stale (a
 * recycled port, a process that is not the one we loaded). Both the code and
 * the sentinel, as upstream's router requires: NOT_FOUND alone is also a
 * backend's answer for its own reasons (e.g. "no face detected").
 */
export function isStaleRoute(e: WardenError): boolean {
  return e.code === Code.NotFound && e.rawMessage.toLowerCase().includes(modelMismatchSentinel);
}

/** A call's say in its replica (prefix-routing.ts), told which one each attempt got. */
export type CallRouteHint = RouteHint & { routed(incarnation: string): void };

/** What a routed call reports per outcome (the coordinator's routed-calls counter). */
export interface RoutedCounter {
  inc(outcome: string): void;
}

export const outcomeOf = (err: unknown): string => (err === undefined ? "ok" : codeName(WardenError.from(err).code));

/** Counts a unary call's outcome once it settles (ok, or its code), passing the result or error on. */
export function outcomeTracker(routed: RoutedCounter): <T>(p: Promise<T>) => Promise<T> {
  return async <T>(p: Promise<T>): Promise<T> => {
    try {
      const v = await p;
      routed.inc("ok");
      return v;
    } catch (err) {
      routed.inc(outcomeOf(err));
      throw err;
    }
  };
}

/**
 * How routed calls hold instances: a lease per attempt, completed in
 * `finally` (so a cancel, deadline or error never strands an in-flight
 * count), and one retry on a fresh instance when the first one is gone
 * (UNAVAILABLE) or stale (NOT_FOUND "model identity mismatch"). Either way
 * the instance is removed through the normal path first. DEADLINE_EXCEEDED
 * does not mean dead and is never retried.
 */
export class RoutedCalls {
  constructor(
    private readonly loader: Loader<BackendClientHandle>,
    private readonly log: Logger,
    /** Per-model admission (models with `admission:`); undefined = every call goes straight to routing. */
    private readonly gate?: AdmissionGate,
  ) {}

  /** Whether `e` from `lease`'s instance removes it; throws the explanation when it was being evicted anyway. */
  private async removeIfGone(model: string, lease: Lease<BackendClientHandle>, e: WardenError, signal: AbortSignal): Promise<boolean> {
    const stale = isStaleRoute(e);
    if ((e.code !== Code.Unavailable && !stale) || signal.aborted) return false;
    if (this.loader.isBeingStopped(lease.incarnation)) {
      // The instance was evicted while the call ran: that explains the
      // failure; no retry (it would load the model straight back).
      throw new WardenError(Code.Unavailable, `model "${model}" was evicted while the call ran: ${e.rawMessage}`);
    }
    if (stale) this.log.warn("backend holds another model (stale route); removing it", { model, incarnation: lease.incarnation, address: lease.address, error: e.rawMessage });
    else this.log.warn("backend unavailable; removing it", { model, incarnation: lease.incarnation, address: lease.address });
    lease.complete();
    // A stale route is removed the way a gone process is: the agent stops the incarnation it started, if it still runs.
    await this.loader.reportUnavailable(lease.incarnation).catch(() => undefined);
    return true;
  }

  private async acquire(model: string, signal: AbortSignal, hint: CallRouteHint | undefined): Promise<Lease<BackendClientHandle>> {
    if (hint === undefined) return this.loader.acquire(model, signal);
    const lease = await this.loader.acquire(model, signal, hint);
    hint.routed(lease.incarnation);
    return lease;
  }

  /** One unary call: retried once on a fresh instance while `mayRetry()`; holds one admission place throughout. */
  async unary<T>(model: string, signal: AbortSignal, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint?: CallRouteHint, caller: CallerClass = defaultCaller): Promise<T> {
    // Models without `admission:` go straight to routing, without an extra turn.
    if (this.gate?.gates(model) !== true) return this.unaryAttempts(model, signal, fn, mayRetry, hint);
    const release = await this.gate.enter(model, caller, signal);
    try {
      return await this.unaryAttempts(model, signal, fn, mayRetry, hint);
    } finally {
      release();
    }
  }

  private async unaryAttempts<T>(model: string, signal: AbortSignal, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint: CallRouteHint | undefined): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const lease = await this.acquire(model, signal, hint);
      try {
        return await fn(lease);
      } catch (err) {
        const e = WardenError.from(err);
        if ((await this.removeIfGone(model, lease, e, signal)) && attempt === 0 && mayRetry()) continue;
        throw e;
      } finally {
        lease.complete();
      }
    }
  }

  /**
   * One streaming call, tracked from the lease to its last reply: retried
   * once on a fresh instance only while no reply reached the caller and
   * `mayRetry()` (a streaming request's messages can still be replayed).
   * `onReply` runs before each reply is passed on.
   */
  async *stream<T>(model: string, signal: AbortSignal, open: (lease: Lease<BackendClientHandle>) => AsyncIterable<T>, mayRetry: () => boolean, routed: RoutedCounter, onReply?: () => void, hint?: CallRouteHint, caller: CallerClass = defaultCaller): AsyncGenerator<T> {
    let release: (() => void) | undefined;
    try {
      release = this.gate?.gates(model) === true ? await this.gate.enter(model, caller, signal) : undefined;
    } catch (err) {
      routed.inc(outcomeOf(err));
      throw err;
    }
    try {
      yield* this.streamAttempts(model, signal, open, mayRetry, routed, onReply, hint);
    } finally {
      release?.();
    }
  }

  private async *streamAttempts<T>(model: string, signal: AbortSignal, open: (lease: Lease<BackendClientHandle>) => AsyncIterable<T>, mayRetry: () => boolean, routed: RoutedCounter, onReply: (() => void) | undefined, hint: CallRouteHint | undefined): AsyncGenerator<T> {
    let sent = 0;
    for (let attempt = 0; ; attempt++) {
      const lease = await this.acquire(model, signal, hint);
      try {
        for await (const reply of open(lease)) {
          sent++;
          onReply?.();
          yield reply;
        }
        routed.inc("ok");
        return;
      } catch (err) {
        const e = WardenError.from(err);
        let removed: boolean;
        try {
          removed = await this.removeIfGone(model, lease, e, signal);
        } catch (evicted) {
          routed.inc(outcomeOf(evicted));
          throw evicted;
        }
        if (removed && attempt === 0 && sent === 0 && mayRetry()) continue;
        routed.inc(outcomeOf(e));
        throw e;
      } finally {
        lease.complete();
      }
    }
  }
}
