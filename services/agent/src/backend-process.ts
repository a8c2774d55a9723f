import { Code, WardenError, type Cancel, type Clock, type Logger } from "@warden/common";
import type { BackendLogs } from "./backend-logs.js";
import type { StopRequestRecord } from "./backend-record.js";
import type { ExitInfo, ProcessHandle } from "./process-handle.js";

/**
 * Lifecycle of one backend process. Every state and what moves it on:
 * - `spawning`: the pid is known; Health is being polled. → loading (Health answered),
 *   stopping (stop), exited (process ended).
 * - `loading`: LoadModel is in flight. → ready, stopping, exited.
 * - `ready`: serving. → stopping, exited.
 * - `stopping`: a signal was sent; the escalation runs to the reap whatever callers
 *   do. → stopping (force upgrade / escalation), exited.
 * - `exited`: the process is gone (reaped, or vanished from /proc if adopted). Final.
 */
export type BackendPhase =
  | { readonly t: "spawning" }
  | { readonly t: "loading" }
  | { readonly t: "ready"; readonly memoryBytes: number }
  | { readonly t: "stopping"; readonly force: boolean; readonly escalated: boolean }
  | { readonly t: "exited"; readonly exit: ExitInfo; readonly intentional: boolean; readonly escalated: boolean; readonly lastStderrLine: string };

const allowed: Readonly<Record<BackendPhase["t"], readonly BackendPhase["t"][]>> = {
  spawning: ["loading", "stopping", "exited"],
  loading: ["ready", "stopping", "exited"],
  ready: ["stopping", "exited"],
  stopping: ["stopping", "exited"],
  exited: [],
};

/** Outcome of a stop: how the process ended. */
export interface StopOutcome {
  exitCode: number | null;
  signal: string;
  /** SIGKILL followed an ignored SIGTERM. */
  escalated: boolean;
}

/** Identity of a backend, fixed for its life. */
export interface BackendIdentity {
  incarnation: string;
  model: string;
  backend: string;
  address: string;
  port: number;
  pidStartTime: string;
  gpuDevice: string;
  startedAtMs: number;
  /** StartBackendRequest.load_digest ("" when none was given). */
  loadDigest: string;
  /** SHA-256 digests of the cached artifacts it uses (the cache never evicts them while it lives); undefined = not known (a record from an older agent). */
  artifactDigests?: readonly string[];
  /** sha256 of the backend bundle it was started from; undefined when its catalog entry names none (or an older agent's record). */
  bundleDigest?: string;
}

export interface BackendProcessDeps {
  clock: Clock;
  graceMs: number;
  logger: Logger;
  /** Called after every transition, in order; the agent turns these into records, events and port releases. */
  onTransition(proc: BackendProcess, from: BackendPhase, to: BackendPhase): void;
}

/**
 * The single owner of one backend process. All state changes go through
 * {@link BackendProcess.setPhase}; decisions that depend on the state are taken
 * synchronously inside the methods here (no read-then-act across an await).
 */
export class BackendProcess {
  private phase: BackendPhase;
  private stopDone: Promise<StopOutcome> | undefined;
  private stopRequest: StopRequestRecord | null;
  private cancelGrace: Cancel = () => {};
  /** Resolves when the phase becomes `exited`. */
  readonly gone: Promise<Extract<BackendPhase, { t: "exited" }>>;

  constructor(
    readonly id: BackendIdentity,
    readonly handle: ProcessHandle,
    readonly logs: BackendLogs,
    private readonly deps: BackendProcessDeps,
    initial: { phase: "spawning" | "ready"; stopRequested: StopRequestRecord | null },
  ) {
    this.phase = initial.phase === "ready" ? { t: "ready", memoryBytes: 0 } : { t: "spawning" };
    this.stopRequest = initial.stopRequested;
    this.gone = handle.exited.then(async (exit) => {
      // Leave nothing behind: helpers the backend forked die with their group.
      handle.signalGroup("SIGKILL");
      const lastStderrLine = await logs.lastStderrLine();
      const was = this.phase;
      const intentional = was.t === "stopping";
      const next = { t: "exited", exit, intentional, escalated: was.t === "stopping" && was.escalated, lastStderrLine } as const;
      this.setPhase(next);
      return next;
    });
  }

  get pid(): number {
    return this.handle.pid;
  }

  state(): BackendPhase {
    return this.phase;
  }

  stopRequested(): StopRequestRecord | null {
    return this.stopRequest;
  }

  /** Records that a StopBackend arrived; reported until the process is gone. The first request is kept. */
  noteStopRequested(req: StopRequestRecord): boolean {
    if (this.stopRequest !== null || this.phase.t === "exited") return false;
    this.stopRequest = req;
    return true;
  }

  /** The one transition point. Illegal transitions are bugs: they throw INTERNAL naming both states. */
  private setPhase(next: BackendPhase): void {
    const from = this.phase;
    if (!allowed[from.t].includes(next.t)) {
      throw new WardenError(Code.Internal, `backend ${this.id.incarnation}: illegal transition ${from.t} -> ${next.t}`);
    }
    this.phase = next;
    if (from.t !== next.t) this.deps.logger.info("backend transition", { incarnation: this.id.incarnation, model: this.id.model, pid: this.pid, from: from.t, to: next.t });
    if (next.t === "exited") this.cancelGrace();
    this.deps.onTransition(this, from, next);
  }

  /** Health answered: LoadModel goes next. False when the process is no longer spawning (stopped or gone). */
  markLoading(): boolean {
    if (this.phase.t !== "spawning") return false;
    this.setPhase({ t: "loading" });
    return true;
  }

  /** LoadModel succeeded. False when the process is no longer loading. */
  markReady(memoryBytes: number): boolean {
    if (this.phase.t !== "loading") return false;
    this.setPhase({ t: "ready", memoryBytes });
    return true;
  }

  /**
   * Stops the process: graceful = SIGTERM to the group, SIGKILL after graceMs,
   * then the reap; force = SIGKILL at once, then the reap. Single-flight: a second
   * call joins the first (a force call upgrades a graceful one in its grace).
   * The returned promise is independent of any caller: once a signal is sent,
   * the escalation and the reap always complete. A process already gone resolves
   * with how it ended.
   */
  stop(force: boolean): Promise<StopOutcome> {
    const p = this.phase;
    switch (p.t) {
      case "exited":
        return Promise.resolve({ exitCode: p.exit.exitCode, signal: p.exit.signal, escalated: p.escalated });
      case "stopping":
        if (force && !p.force) {
          this.setPhase({ t: "stopping", force: true, escalated: p.escalated });
          this.cancelGrace();
          this.handle.signalGroup("SIGKILL");
        }
        return this.stopDone ?? this.gone.then(outcomeOf);
      case "spawning":
      case "loading":
      case "ready": {
        this.setPhase({ t: "stopping", force, escalated: false });
        this.handle.signalGroup(force ? "SIGKILL" : "SIGTERM");
        if (!force) {
          this.cancelGrace = this.deps.clock.setTimer(this.deps.graceMs, () => {
            const now = this.phase;
            if (now.t !== "stopping" || now.force) return;
            this.deps.logger.warn("backend ignored SIGTERM for the grace period; sending SIGKILL", { incarnation: this.id.incarnation, pid: this.pid, graceMs: this.deps.graceMs });
            this.setPhase({ t: "stopping", force: true, escalated: true });
            this.handle.signalGroup("SIGKILL");
          });
        }
        this.stopDone = this.gone.then(outcomeOf);
        return this.stopDone;
      }
    }
  }
}

function outcomeOf(p: Extract<BackendPhase, { t: "exited" }>): StopOutcome {
  return { exitCode: p.exit.exitCode, signal: p.exit.signal, escalated: p.escalated };
}
