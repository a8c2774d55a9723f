/** How a simulated backend process behaves (drawn per start from the seed's options). */
export interface BackendBehaviour {
  /** Time from spawn to ready. */
  readonly loadMs: number;
  /** Never becomes ready (a hung load). */
  readonly hangs: boolean;
  /** Fails its load (exits) instead of becoming ready. */
  readonly failsLoad: boolean;
  /** Ignores SIGTERM: only SIGKILL ends it. */
  readonly ignoresSigterm: boolean;
  /** Crashes this long after becoming ready (backend crash), or never. */
  readonly crashAfterMs: number | undefined;
  /** Multiplies each call's duration (slow backend). */
  readonly slowFactor: number;
}

/** One real process on a simulated node: what is really running, whatever Warden believes. */
export interface TruthProcess {
  readonly pid: number;
  readonly nodeId: string;
  readonly address: string;
  /** From the process environment (coordinator-minted); survives the agent losing its records. */
  readonly incarnation: string;
  readonly model: string;
  readonly memoryBytes: number;
  readonly behaviour: BackendBehaviour;
  readonly spawnedAtMs: number;
  phase: "loading" | "ready" | "dead";
  readyAtMs: number | undefined;
  diedAtMs: number | undefined;
  /** A kill that cannot take effect right now (process in D state): fault F1. */
  unkillableUntilMs: number;
}

/** One routed call the harness holds a lease for. */
export interface TruthRequest {
  readonly id: number;
  readonly incarnation: string;
  readonly address: string;
  readonly model: string;
  readonly startedAtMs: number;
}

/**
 * The ground truth: which processes really run where and which calls are
 * really open. Only the simulated world writes it; checkers compare Warden's
 * view against it.
 */
export class GroundTruth {
  private nextPid = 1000;
  readonly processes = new Map<number, TruthProcess>();
  readonly byIncarnation = new Map<string, TruthProcess>();
  readonly openRequests = new Map<number, TruthRequest>();
  /** Every incarnation any coordinator generation minted. */
  readonly minted = new Set<string>();
  /** Incarnations an operator forgot (audited; exempt from the amnesia check). */
  readonly forgotten = new Set<string>();
  /** When each forgotten incarnation was forgotten (calls opened before then are no longer Warden's to count). */
  readonly forgottenAtMs = new Map<string, number>();
  /** Nodes an operator or the timeout declared lost (audited). */
  readonly declaredLost = new Set<string>();

  spawn(init: Omit<TruthProcess, "pid" | "phase" | "readyAtMs" | "diedAtMs" | "unkillableUntilMs">): TruthProcess {
    const p: TruthProcess = { ...init, pid: this.nextPid++, phase: "loading", readyAtMs: undefined, diedAtMs: undefined, unkillableUntilMs: 0 };
    this.processes.set(p.pid, p);
    this.byIncarnation.set(p.incarnation, p);
    return p;
  }

  kill(p: TruthProcess, nowMs: number): void {
    if (p.phase === "dead") return;
    p.phase = "dead";
    p.diedAtMs = nowMs;
  }

  /** Live processes (a fresh array; callers may filter). */
  live(): TruthProcess[] {
    const out: TruthProcess[] = [];
    for (const p of this.processes.values()) if (p.phase !== "dead") out.push(p);
    return out;
  }

  /** Forgets dead processes long gone, so state stays bounded over a long run. */
  prune(beforeMs: number): void {
    for (const [pid, p] of this.processes) {
      if (p.phase === "dead" && p.diedAtMs !== undefined && p.diedAtMs < beforeMs) {
        this.processes.delete(pid);
      }
    }
  }
}
