import { AdmissionQueue, admissionLimits, priorityClasses, type AdmissionSettings, type PriorityClass } from "@warden/admission";
import { Code, WardenError, abortReason } from "@warden/common";
import type { HandlerContext } from "@warden/grpc";

/** Who is calling, for the queue: the class the call runs at and the principal it is shared fairly with. */
export interface CallerClass {
  readonly cls: PriorityClass;
  /** The token's name (auth on) or "anonymous": calls of one principal share one turn. */
  readonly principal: string;
}

export const defaultCaller: CallerClass = Object.freeze({ cls: "standard", principal: "anonymous" });

interface Ticket {
  readonly cls: PriorityClass;
  readonly principal: string;
  /** Numbers the gate's calls for its observer. */
  readonly id: number;
  resolve(): void;
  reject(e: WardenError): void;
}

/**
 * What the simulation's checkers see of a gate, in the same turn as the
 * queue's choice: each call let in, each call queued, each waiting call
 * that left without being let in. `ticket` numbers the gate's calls.
 */
export type AdmissionObservation =
  | {
      readonly kind: "admitted";
      readonly model: string;
      readonly cls: PriorityClass;
      readonly principal: string;
      readonly ticket: number;
      /** Let in from the queue (false: straight through, nothing waiting). */
      readonly fromQueue: boolean;
      /** Calls in flight through the gate, this one included. */
      readonly inFlight: number;
      readonly capacity: number;
      /** Calls of a higher class still waiting at that moment (must be 0). */
      readonly waitingAbove: number;
    }
  | { readonly kind: "queued"; readonly model: string; readonly cls: PriorityClass; readonly principal: string; readonly ticket: number }
  /** Cancelled, gave up, or pushed out of a full queue. */
  | { readonly kind: "gone"; readonly model: string; readonly ticket: number };

/** What the gate reads of the world: a model's settings and how many replicas it has now. */
export interface AdmissionGatePorts {
  /** The model's `admission:` settings; undefined = no gate (calls go straight to routing). */
  settingsOf(model: string): AdmissionSettings | undefined;
  /** Ready or loading replicas of the model now. */
  replicasOf(model: string): number;
  /** Each admission as it happens (the simulation's invariant checker); production leaves it out. */
  observe?(o: AdmissionObservation): void;
}

const noRelease = (): void => undefined;

/** The gate and how a gRPC call's class is read (token and `warden-priority` metadata), for the gRPC routes. */
export interface RoutingAdmission {
  readonly gate: AdmissionGate;
  callerOf(ctx: HandlerContext): CallerClass;
}

/**
 * Per-model admission in front of routing: a model with `admission:` in its
 * config has at most `maxInFlightPerReplica` × replicas calls in flight; the
 * rest wait in its {@link AdmissionQueue} (by class, then round robin
 * between principals) or are refused at once with RESOURCE_EXHAUSTED and a
 * Retry-After. Models without it are not gated at all. One owner of each
 * queue (this object, on the event loop); a waiter that gives up (deadline,
 * cancel) leaves the queue at once.
 */
export class AdmissionGate {
  private readonly queues = new Map<string, AdmissionQueue<Ticket>>();
  /** Refusals per model and class since start (metrics); bounded by the configured models × 3 classes. */
  private readonly refusedCounts = new Map<string, number>();
  private nextTicket = 0;

  constructor(private readonly ports: AdmissionGatePorts) {}

  /** Whether calls of `model` go through the gate (it has `admission:`): the hot path of every other model skips it whole. */
  gates(model: string): boolean {
    return this.ports.settingsOf(model) !== undefined;
  }

  /** Waits for a place for one call of `model`; resolves with its release (call it exactly when the call ends). */
  async enter(model: string, caller: CallerClass, signal: AbortSignal): Promise<() => void> {
    const settings = this.ports.settingsOf(model);
    if (settings === undefined) return noRelease;
    if (signal.aborted) throw abortReason(signal);
    let q = this.queues.get(model);
    if (q === undefined) {
      q = new AdmissionQueue<Ticket>();
      this.queues.set(model, q);
    }
    const queue = q;
    const limits = admissionLimits(settings, this.ports.replicasOf(model));
    // Capacity may have grown since the last call ended (a replica became ready).
    this.admit(model, queue, queue.pump(limits), limits.capacity);
    let ticket: Ticket | undefined;
    const waited = new Promise<void>((resolve, reject) => {
      ticket = { cls: caller.cls, principal: caller.principal, id: this.nextTicket++, resolve, reject };
    });
    if (ticket === undefined) throw new Error("unreachable: the promise executor runs synchronously");
    const own = ticket;
    const r = queue.enter(own, caller.cls, caller.principal, limits);
    if (r.pushedOut !== undefined) {
      this.ports.observe?.({ kind: "gone", model, ticket: r.pushedOut.ticket.id });
      this.countRefused(model, r.pushedOutClass ?? "sheddable");
      r.pushedOut.ticket.reject(this.refusal(model, settings, r.pushedOut.why));
    }
    if (r.t === "refused") {
      this.countRefused(model, caller.cls);
      throw this.refusal(model, settings, r.why);
    }
    if (r.t === "admitted") this.ports.observe?.({ kind: "admitted", model, cls: caller.cls, principal: caller.principal, ticket: own.id, fromQueue: false, inFlight: queue.inFlight, capacity: limits.capacity, waitingAbove: 0 });
    if (r.t === "queued") {
      this.ports.observe?.({ kind: "queued", model, cls: caller.cls, principal: caller.principal, ticket: own.id });
      const onAbort = (): void => {
        if (!queue.cancel(own)) return;
        this.ports.observe?.({ kind: "gone", model, ticket: own.id });
        own.reject(abortReason(signal));
      };
      signal.addEventListener("abort", onAbort, { once: true });
      try {
        await waited;
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const now = this.ports.settingsOf(model);
      // A model whose gate was removed by a reload lets everything waiting go.
      const l = now === undefined ? { ...limits, capacity: Number.MAX_SAFE_INTEGER } : admissionLimits(now, this.ports.replicasOf(model));
      this.admit(model, queue, queue.leave(l), l.capacity);
      if (queue.inFlight === 0 && queue.queued === 0) this.queues.delete(model);
    };
  }

  /** Calls in flight and waiting per class, for each model with calls in its gate now (metrics). */
  *depths(): Iterable<{ readonly model: string; readonly inFlight: number; readonly waiting: Readonly<Record<PriorityClass, number>> }> {
    for (const [model, q] of this.queues) yield { model, inFlight: q.inFlight, waiting: { critical: q.queuedOf("critical"), standard: q.queuedOf("standard"), sheddable: q.queuedOf("sheddable") } };
  }

  /** Refusals since start, per model and class (metrics). */
  *refused(): Iterable<{ readonly model: string; readonly cls: PriorityClass; readonly count: number }> {
    for (const [key, count] of this.refusedCounts) {
      const i = key.lastIndexOf("/");
      yield { model: key.slice(0, i), cls: key.slice(i + 1) as PriorityClass, count };
    }
  }

  /** Wakes calls the queue let in (and shows each to `observe`, in the same turn as the queue's choice). */
  private admit(model: string, queue: AdmissionQueue<Ticket>, tickets: readonly Ticket[], capacity: number): void {
    const ports = this.ports;
    for (const t of tickets) {
      if (ports.observe !== undefined) {
        let waitingAbove = 0;
        for (const c of priorityClasses) {
          if (c === t.cls) break;
          waitingAbove += queue.queuedOf(c);
        }
        ports.observe({ kind: "admitted", model, cls: t.cls, principal: t.principal, ticket: t.id, fromQueue: true, inFlight: queue.inFlight, capacity, waitingAbove });
      }
      t.resolve();
    }
  }

  private countRefused(model: string, cls: PriorityClass): void {
    const key = `${model}/${cls}`;
    this.refusedCounts.set(key, (this.refusedCounts.get(key) ?? 0) + 1);
  }

  private refusal(model: string, s: AdmissionSettings, why: string): WardenError {
    return new WardenError(Code.ResourceExhausted, `model "${model}" is saturated: ${why}; retry after ${String(Math.ceil(s.retryAfterMs / 1000))}s`, {
      details: { model, retryAfterS: Math.ceil(s.retryAfterMs / 1000) },
    });
  }
}
