import { Code, WardenError, codeName, type CallCancel, type Logger } from "@warden/common";
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

/** One routed call as the workload trace keeps it: never the request or reply, only sizes and times. */
export interface RoutedCallRecord {
  readonly model: string;
  readonly cls: CallerClass["cls"];
  /** Arrival (before admission) to the lease of the attempt that served it; to the failure when none did. */
  readonly waitMs: number;
  /** Lease to its completion (0 when no instance served it). */
  readonly durMs: number;
  readonly ok: boolean;
  readonly reqBytes?: number;
  readonly respBytes?: number;
}

/** Sees every routed call once it ends (the workload trace); must not throw or block. */
export interface RoutedCallObserver {
  readonly clock: { now(): number };
  callEnded(c: RoutedCallRecord): void;
}

/** Sizes a surface that sees a call as bytes fills in (the Backend router, the data-plane Predict). */
export interface CallBytes {
  reqBytes?: number;
  respBytes?: number;
}

/** What a routed call reports per outcome (the coordinator's routed-calls counter). */
export interface RoutedCounter {
  inc(outcome: string): void;
}

export const outcomeOf = (err: unknown): string => (err === undefined ? "ok" : codeName(WardenError.from(err).code));

/**
 * Counts a unary call's outcome once it settles (ok, or its code), passing
 * the result or error on. The two reactions are made once per tracker, not per
 * call (this wraps every routed call).
 */
export function outcomeTracker(routed: RoutedCounter): <T>(p: Promise<T>) => Promise<T> {
  const ok = <T>(v: T): T => {
    routed.inc("ok");
    return v;
  };
  const failed = (err: unknown): never => {
    routed.inc(outcomeOf(err));
    throw err;
  };
  return <T>(p: Promise<T>): Promise<T> => p.then(ok, failed);
}

/** `p`, counted by `routed` once it settles (ok, or its code); `p` itself when nobody counts here. */
function counted<T>(p: Promise<T>, routed: RoutedCounter | undefined): Promise<T> {
  return routed === undefined ? p : outcomeTracker(routed)(p);
}

/**
 * One observed call's timing: `leased` at each lease (the last one counts),
 * `end` once. One object with prototype methods per call, not a pair of
 * closures: this runs on every routed call.
 */
class CallWatch {
  private readonly arrived: number;
  private leasedAt: number | undefined;

  constructor(
    private readonly o: RoutedCallObserver,
    private readonly model: string,
    private readonly cls: CallerClass["cls"],
    private readonly bytes: CallBytes | undefined,
  ) {
    this.arrived = o.clock.now();
  }

  leased(): void {
    this.leasedAt = this.o.clock.now();
  }

  end(): void {
    const now = this.o.clock.now();
    const leasedAt = this.leasedAt;
    // ok: an instance served it (its own error afterwards is the backend's, not the policy's).
    const served = leasedAt !== undefined;
    const rec: { -readonly [K in keyof RoutedCallRecord]: RoutedCallRecord[K] } = { model: this.model, cls: this.cls, waitMs: (served ? leasedAt : now) - this.arrived, durMs: served ? now - leasedAt : 0, ok: served };
    const b = this.bytes;
    if (b?.reqBytes !== undefined) rec.reqBytes = b.reqBytes;
    if (b?.respBytes !== undefined) rec.respBytes = b.respBytes;
    this.o.callEnded(rec);
  }
}

/**
 * A unary call's cancellation: its AbortSignal, or the lean server's
 * CallCancel (HandlerContext.cancel), whose AbortSignal is made only when a
 * call has to wait (a load, the admission queue).
 */
export type CallSignalOf = AbortSignal | CallCancel;

function abortSignalOf(s: CallSignalOf): AbortSignal {
  return s instanceof AbortSignal ? s : s.signal;
}

/** `p`, with `w` ended once it settles (before its reactions run). */
function watched<T>(p: Promise<T>, w: CallWatch | undefined): Promise<T> {
  if (w === undefined) return p;
  return p.then(
    (v) => {
      w.end();
      return v;
    },
    (err: unknown) => {
      w.end();
      throw err;
    },
  );
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
    /** Told of every call when it ends (the workload trace); undefined = nobody. */
    private readonly observer?: RoutedCallObserver,
  ) {}

  /** A call's timing for the observer, started at arrival; undefined when nobody observes. */
  private watch(model: string, caller: CallerClass, bytes: CallBytes | undefined): CallWatch | undefined {
    return this.observer === undefined ? undefined : new CallWatch(this.observer, model, caller.cls, bytes);
  }

  /** Whether `e` from `lease`'s instance removes it; throws the explanation when it was being evicted anyway. */
  private async removeIfGone(model: string, lease: Lease<BackendClientHandle>, e: WardenError, signal: { readonly aborted: boolean }): Promise<boolean> {
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

  /**
   * One unary call: retried once on a fresh instance while `mayRetry()`;
   * holds one admission place throughout. The usual call — no gate, a
   * replica ready — takes its lease in this turn and adds one promise turn to
   * `fn`'s (this runs on every routed call); waits, loads and the retry go
   * through `unaryAttempts`. With `routed`, the outcome is counted there
   * too: in the same reaction as the lease's completion when the call
   * succeeds on its first lease (no promise turn of its own, as
   * `outcomeTracker` takes).
   */
  unary<T>(model: string, signal: CallSignalOf, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint?: CallRouteHint, caller: CallerClass = defaultCaller, bytes?: CallBytes, routed?: RoutedCounter): Promise<T> {
    const w = this.watch(model, caller, bytes);
    // Models without `admission:` go straight to routing; the watch ends once the admission place is given back.
    const gate = this.gate;
    if (gate?.gates(model) === true) return counted(watched(this.admitted(gate, model, signal, fn, mayRetry, hint, caller, w), w), routed);
    return this.firstAttempt(model, signal, fn, mayRetry, hint, w, true, routed);
  }

  private async admitted<T>(gate: AdmissionGate, model: string, signal: CallSignalOf, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint: CallRouteHint | undefined, caller: CallerClass, w: CallWatch | undefined): Promise<T> {
    const release = await gate.enter(model, caller, abortSignalOf(signal));
    try {
      return await this.firstAttempt(model, signal, fn, mayRetry, hint, w, false, undefined);
    } finally {
      release();
    }
  }

  /**
   * The first attempt on a lease taken in this turn when one is ready; else
   * (or to retry) unaryAttempts. With `endWatch`, ends `w` when the call
   * settles: in the same reaction as the lease's completion on success; so
   * is `routed`'s count.
   */
  private firstAttempt<T>(model: string, signal: CallSignalOf, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint: CallRouteHint | undefined, w: CallWatch | undefined, endWatch: boolean, routed: RoutedCounter | undefined): Promise<T> {
    const ends = endWatch ? w : undefined;
    let lease: Lease<BackendClientHandle> | undefined;
    try {
      lease = this.loader.acquireNow(model, signal, hint);
    } catch (err) {
      // As from acquire: the call fails unrouted (the caller's promise, never a throw).
      ends?.end();
      const e = WardenError.from(err);
      routed?.inc(outcomeOf(e));
      return Promise.reject(e);
    }
    if (lease === undefined) return counted(watched(this.unaryAttempts(model, signal, fn, mayRetry, hint, w, 0), ends), routed);
    let result: Promise<T>;
    try {
      hint?.routed(lease.incarnation);
      w?.leased();
      result = fn(lease);
    } catch (err) {
      result = Promise.reject(WardenError.from(err));
    }
    return result.then(
      (v) => {
        lease.complete();
        ends?.end();
        routed?.inc("ok");
        return v;
      },
      (err: unknown) => counted(watched(this.afterFailure(model, signal, fn, mayRetry, hint, w, lease, err), ends), routed),
    );
  }

  /** The first attempt failed: the instance is removed when gone or stale, and the call retried once on a fresh one. */
  private async afterFailure<T>(model: string, signal: CallSignalOf, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint: CallRouteHint | undefined, w: { leased(): void } | undefined, lease: Lease<BackendClientHandle>, err: unknown): Promise<T> {
    const e = WardenError.from(err);
    let retry: boolean;
    try {
      retry = (await this.removeIfGone(model, lease, e, signal)) && mayRetry();
    } finally {
      lease.complete();
    }
    if (!retry) throw e;
    return this.unaryAttempts(model, signal, fn, mayRetry, hint, w, 1);
  }

  /** Attempts from `first` on (0: the first, retried once; 1: the retry), each on a lease `acquire` waits for. */
  private async unaryAttempts<T>(model: string, signal: CallSignalOf, fn: (lease: Lease<BackendClientHandle>) => Promise<T>, mayRetry: () => boolean, hint: CallRouteHint | undefined, w: { leased(): void } | undefined, first: number): Promise<T> {
    for (let attempt = first; ; attempt++) {
      const lease = await this.acquire(model, abortSignalOf(signal), hint);
      w?.leased();
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
  async *stream<T>(model: string, signal: AbortSignal, open: (lease: Lease<BackendClientHandle>) => AsyncIterable<T>, mayRetry: () => boolean, routed: RoutedCounter, onReply?: () => void, hint?: CallRouteHint, caller: CallerClass = defaultCaller, bytes?: CallBytes): AsyncGenerator<T> {
    const w = this.watch(model, caller, bytes);
    try {
      let release: (() => void) | undefined;
      try {
        release = this.gate?.gates(model) === true ? await this.gate.enter(model, caller, signal) : undefined;
      } catch (err) {
        routed.inc(outcomeOf(err));
        throw err;
      }
      try {
        yield* this.streamAttempts(model, signal, open, mayRetry, routed, onReply, hint, w);
      } finally {
        release?.();
      }
    } finally {
      // A stream the caller abandoned ends here too (the generator's return).
      w?.end();
    }
  }

  private async *streamAttempts<T>(model: string, signal: AbortSignal, open: (lease: Lease<BackendClientHandle>) => AsyncIterable<T>, mayRetry: () => boolean, routed: RoutedCounter, onReply: (() => void) | undefined, hint: CallRouteHint | undefined, w: { leased(): void } | undefined): AsyncGenerator<T> {
    let sent = 0;
    for (let attempt = 0; ; attempt++) {
      const lease = await this.acquire(model, signal, hint);
      w?.leased();
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
