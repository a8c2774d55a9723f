import { invalidArgument, isPlanted, throwIfAborted } from "@warden/common";
import type { AdmissionDecision, ExplicitSelection, Occupancy, LimitExceeded, SettleResult, Shortfall, TickDecision } from "./decision.js";
import type { AdmissionRequest } from "./instance.js";
import { stopOutcomeFromError, type StopCommand, type StopOutcome } from "./stop-command.js";
import type { ExplicitStopOptions, WatchdogCore } from "./watchdog-core.js";

/**
 * The one side-effect port: runs the stop sequence of DESIGN §3.3 for one
 * instance (lock, busy wait, `Free`, stop intent, drop the local half,
 * `StopBackend`) and reports what happened. It should resolve, never reject;
 * a rejection is mapped by {@link stopOutcomeFromError}. It must bound itself
 * with the stop deadline: the watchdog never times a stop out.
 */
export interface StopPort {
  stop(command: StopCommand): Promise<StopOutcome>;
}

/** A settle and the outcome that produced it. */
export interface SettleReport {
  readonly command: StopCommand;
  readonly outcome: StopOutcome;
  readonly result: SettleResult;
}

/** What an enforcement came to once every victim it selected has settled. */
export interface EnforcementResult {
  /** Victims settled by row 2 (really stopped). */
  readonly evicted: number;
  /** The selection fell short, or any stop failed. */
  readonly needMore: boolean;
  readonly settles: readonly SettleReport[];
}

/** Admission through the facade. */
export type AdmissionResult =
  | { readonly t: "admitted"; readonly occupancy: Occupancy; readonly limitExceeded: LimitExceeded | undefined }
  | (EnforcementResult & { readonly t: "waited"; readonly cause: "group" | "limit"; readonly shortfall: Shortfall });

/** Explicit stop through the facade. */
export type ExplicitStopResult =
  | { readonly t: "settled"; readonly report: SettleReport }
  /** Admitted, not spawned: cancel the start and `releaseReservation`. */
  | { readonly t: "reserved" }
  | { readonly t: "unknown" }
  /** Pending through a stop this facade did not send (the core was driven directly): no second stop is sent. */
  | { readonly t: "pending-elsewhere"; readonly command: StopCommand };

export interface WatchdogServiceOptions {
  readonly core: WatchdogCore;
  readonly stopPort: StopPort;
  /**
   * Called once per settle, in the settle's turn (emit `eviction.stopped` /
   * `eviction.failed`, metrics). Must not throw: an exception rejects the
   * promises awaiting that settle.
   */
  readonly onSettled?: (report: SettleReport) => void;
}

/** Sleeps on the caller's clock; injected so this package has no timers. */
export type Sleep = (ms: number, signal?: AbortSignal) => Promise<void>;

/**
 * The thin async facade over {@link WatchdogCore}: sends the stops the core
 * selects through the {@link StopPort}, single-flight per instance, and
 * settles each in the turn its outcome arrives. Ticks never await stops;
 * an enforcement on behalf of a load resolves only when every victim it
 * selected has settled.
 */
export class WatchdogService {
  readonly core: WatchdogCore;
  private readonly port: StopPort;
  private readonly onSettled: ((report: SettleReport) => void) | undefined;
  private readonly inflight = new Map<string, Promise<SettleReport>>();

  constructor(options: WatchdogServiceOptions) {
    this.core = options.core;
    this.port = options.stopPort;
    this.onSettled = options.onSettled;
  }

  /** Stops in flight (one per instance at most). */
  get stopsInFlight(): number {
    return this.inflight.size;
  }

  /** Resolves once every stop in flight now has settled (shutdown, tests). */
  async whenSettled(): Promise<void> {
    await Promise.all([...this.inflight.values()]);
  }

  /**
   * Sends one selected stop, or joins the one already in flight for that
   * incarnation: at most one stop per instance.
   */
  dispatch(command: StopCommand): Promise<SettleReport> {
    const existing = this.inflight.get(command.incarnation);
    if (existing !== undefined) return existing;
    let sent: Promise<StopOutcome>;
    try {
      sent = this.port.stop(command);
    } catch (err) {
      sent = Promise.resolve(stopOutcomeFromError(err));
    }
    const settled = sent
      .then(
        (o) => o,
        (err: unknown) => stopOutcomeFromError(err),
      )
      .then((outcome) => {
        // Settle in the turn the outcome arrives: hasModelAtAddress is asked inside.
        this.inflight.delete(command.incarnation);
        const report: SettleReport = { command, outcome, result: this.core.settle(command.incarnation, outcome) };
        this.onSettled?.(report);
        return report;
      });
    this.inflight.set(command.incarnation, settled);
    return settled;
  }

  private async enforce(stops: readonly StopCommand[], needMore: boolean): Promise<EnforcementResult> {
    const settles = await Promise.all(stops.map((c) => this.dispatch(c)));
    let evicted = 0;
    let failed = false;
    const countFailed = isPlanted("count-failed-stops-as-evicted");
    for (const s of settles) {
      if (s.result.row === 2 || (countFailed && s.outcome.t === "failed")) evicted++;
      if (s.outcome.t === "failed" && !countFailed) failed = true;
    }
    return { evicted, needMore: needMore || failed, settles };
  }

  /**
   * One watchdog tick: selects (busy → idle → memory) and sends the stops
   * without waiting. `settled` lets the caller observe them.
   */
  tick(): { readonly decision: TickDecision; readonly settled: readonly Promise<SettleReport>[] } {
    const decision = this.core.tick();
    return { decision, settled: decision.stops.map((c) => this.dispatch(c)) };
  }

  /** Group exclusivity for a load of `model` on a node; resolves when every victim settled. */
  enforceGroups(nodeId: string, model: string): Promise<EnforcementResult> {
    const d = this.core.enforceGroups(nodeId, model);
    return this.enforce(d.stops, d.needMore);
  }

  /** The per-node limit; resolves when every victim settled. */
  enforceLimit(nodeId: string, trigger?: string): Promise<EnforcementResult> {
    const d = this.core.enforceLimit(nodeId, trigger);
    return this.enforce(d.stops, d.needMore);
  }

  /**
   * One admission attempt: admitted at once, or the victims selected for it
   * are stopped and settled before this resolves. Retry with
   * {@link retryEnforcement} while `t === "waited"`.
   */
  async admit(request: AdmissionRequest): Promise<AdmissionResult> {
    const d: AdmissionDecision = this.core.admit(request);
    if (d.t === "admitted") return d;
    const r = await this.enforce(d.stops, d.needMore);
    if (isPlanted("count-failed-stops-as-evicted") && !r.needMore && d.stops.length > 0 && r.evicted >= d.stops.length) {
      // Planted: trusts the count instead of asking the core again, so nothing is reserved and nothing re-checked.
      return { t: "admitted", occupancy: this.core.occupancy(request.nodeId), limitExceeded: undefined };
    }
    return { t: "waited", cause: d.cause, shortfall: d.shortfall, ...r };
  }

  private async follow(sel: ExplicitSelection): Promise<ExplicitStopResult> {
    switch (sel.t) {
      case "stop":
        return { t: "settled", report: await this.dispatch(sel.command) };
      case "joined": {
        const running = this.inflight.get(sel.command.incarnation);
        if (running === undefined) return { t: "pending-elsewhere", command: sel.command };
        return { t: "settled", report: await running };
      }
      case "reserved":
      case "unknown":
        return sel;
    }
  }

  /** Explicit stop of one instance in any state; a pending one joins the stop in flight. */
  stop(incarnation: string, options: ExplicitStopOptions): Promise<ExplicitStopResult> {
    return this.follow(this.core.selectExplicit(incarnation, options));
  }

  /**
   * Admission with LocalAI's retry budget (DESIGN §5: 30 × 1 s): asks again at
   * once when a wait resolved without need-more, after `intervalMs` when it
   * needs more. Resolves with the last result and the number of attempts.
   */
  async admitWithRetry(
    request: AdmissionRequest,
    options: { readonly maxAttempts?: number; readonly intervalMs?: number; readonly sleep: Sleep; readonly signal?: AbortSignal },
  ): Promise<{ readonly attempts: number; readonly last: AdmissionResult }> {
    const max = options.maxAttempts ?? 30;
    const intervalMs = options.intervalMs ?? 1_000;
    if (!Number.isInteger(max) || max < 1) throw invalidArgument("maxAttempts", `must be an integer >= 1, got ${String(max)}`);
    if (!Number.isFinite(intervalMs) || intervalMs < 0) throw invalidArgument("intervalMs", `must be a finite duration >= 0 ms, got ${String(intervalMs)}`);
    let attempts = 0;
    for (;;) {
      throwIfAborted(options.signal);
      attempts++;
      const last = await this.admit(request);
      if (last.t === "admitted" || attempts >= max) return { attempts, last };
      if (last.needMore) await options.sleep(intervalMs, options.signal);
    }
  }

  /** Explicit stop of every instance on a node (drain); resolves when all settled. */
  async drainNode(nodeId: string, options: { readonly force?: boolean } = {}): Promise<ExplicitStopResult[]> {
    const sels = this.core.selectNode(nodeId, { reason: "drain", force: options.force ?? false });
    return Promise.all(sels.map(({ selection }) => this.follow(selection)));
  }
}

/** Creates the facade. */
export function createWatchdogService(options: WatchdogServiceOptions): WatchdogService {
  return new WatchdogService(options);
}
