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
  /** HA profile: a Free() its agent sent on a coordinator's FreeBackend unloaded its model (the process runs on): the command's epoch, when. */
  freedBy?: { readonly epoch: bigint; readonly atMs: number };
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
 * The open calls by request id, with per-incarnation and per-address counts
 * kept as they change, so a checker reads them after every step in O(1)
 * instead of re-counting every open call.
 */
export class OpenRequests extends Map<number, TruthRequest> {
  private readonly perIncarnation = new Map<string, number>();
  private readonly perAddress = new Map<string, number>();

  override set(id: number, r: TruthRequest): this {
    const prev = super.get(id);
    if (prev !== undefined) this.count(prev, -1);
    super.set(id, r);
    this.count(r, 1);
    return this;
  }

  override delete(id: number): boolean {
    const prev = super.get(id);
    if (prev === undefined) return false;
    this.count(prev, -1);
    return super.delete(id);
  }

  override clear(): void {
    super.clear();
    this.perIncarnation.clear();
    this.perAddress.clear();
  }

  /** Calls really open on `incarnation`. */
  onIncarnation(incarnation: string): number {
    return this.perIncarnation.get(incarnation) ?? 0;
  }

  /** Calls really open at `address` (any incarnation). */
  atAddress(address: string): number {
    return this.perAddress.get(address) ?? 0;
  }

  private count(r: TruthRequest, d: number): void {
    bump(this.perIncarnation, r.incarnation, d);
    bump(this.perAddress, r.address, d);
  }
}

function bump(m: Map<string, number>, k: string, d: number): void {
  const n = (m.get(k) ?? 0) + d;
  if (n === 0) m.delete(k);
  else m.set(k, n);
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
  /** Live processes per node (kept by spawn/kill: heartbeats and checkers read them every step). */
  private readonly liveByNode = new Map<string, Set<TruthProcess>>();
  readonly openRequests = new OpenRequests();
  /** Every incarnation any coordinator generation minted. */
  readonly minted = new Set<string>();
  /** Incarnations an operator forgot (audited; exempt from the amnesia check). */
  readonly forgotten = new Set<string>();
  /**
   * The last request id routed when each forgotten incarnation was forgotten: the calls open
   * then are no longer Warden's to count. An id, not a time: a stall runs the forget, the
   * re-adoption and new calls to it in the same virtual millisecond (seed 28758).
   */
  readonly forgottenAfterRequestId = new Map<string, number>();
  /** Nodes an operator or the timeout declared lost (audited). */
  readonly declaredLost = new Set<string>();
  /** Operator LoadModel calls naming a node, in flight: `model node` → how many (placement rules do not apply to them). */
  readonly explicitLoads = new Map<string, number>();

  /**
   * Runs `load` (a load naming `nodeId`) counted in `explicitLoads` until it settles, follower
   * retries included: a coalesced follower that names a node retries there once its leader fails.
   */
  async explicitLoad(model: string, nodeId: string, load: () => Promise<unknown>): Promise<void> {
    const key = `${model} ${nodeId}`;
    this.explicitLoads.set(key, (this.explicitLoads.get(key) ?? 0) + 1);
    try {
      await load().catch(() => undefined);
    } finally {
      const n = (this.explicitLoads.get(key) ?? 1) - 1;
      if (n <= 0) this.explicitLoads.delete(key);
      else this.explicitLoads.set(key, n);
    }
  }

  spawn(init: Omit<TruthProcess, "pid" | "phase" | "readyAtMs" | "diedAtMs" | "unkillableUntilMs">): TruthProcess {
    const p: TruthProcess = { ...init, pid: this.nextPid++, phase: "loading", readyAtMs: undefined, diedAtMs: undefined, unkillableUntilMs: 0 };
    this.processes.set(p.pid, p);
    this.byIncarnation.set(p.incarnation, p);
    let on = this.liveByNode.get(p.nodeId);
    if (on === undefined) {
      on = new Set();
      this.liveByNode.set(p.nodeId, on);
    }
    on.add(p);
    return p;
  }

  kill(p: TruthProcess, nowMs: number): void {
    if (p.phase === "dead") return;
    p.phase = "dead";
    p.diedAtMs = nowMs;
    this.liveByNode.get(p.nodeId)?.delete(p);
  }

  /** Live processes (a fresh array, in spawn order per node; callers may filter). */
  live(): TruthProcess[] {
    const out: TruthProcess[] = [];
    for (const p of this.processes.values()) if (p.phase !== "dead") out.push(p);
    return out;
  }

  /** Live processes on one node, in spawn order (read-only; do not kill while iterating). */
  liveOn(nodeId: string): ReadonlySet<TruthProcess> {
    return this.liveByNode.get(nodeId) ?? noProcesses;
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

const noProcesses: ReadonlySet<TruthProcess> = new Set();
