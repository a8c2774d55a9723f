/**
 * How far a load got. `waiting_for_recovery`: held at the admission gate
 * until the coordinator's recovery window after a start or takeover ends;
 * `waiting_for_node`: admission, no node can take the model now;
 * `starting`: admitted, the start sent; `resolving`: the node's agent reads
 * a backend bundle image's manifest; `pulling`: it fetches the model's
 * artifacts (and the bundle's layers); `verifying`: their bytes arrived and
 * are being hashed; `unpacking`: the bundle's layers are being extracted;
 * `loading`: the backend process runs and loads the model.
 */
export type LoadJobPhase = WaitingPhase | "starting" | "resolving" | "pulling" | "verifying" | "unpacking" | "loading";

/** What a waiting job waits for (`waiting_for_instance`: the model's own instance to stop, or an adopted one to start). */
export type WaitingPhase = "waiting_for_recovery" | "waiting_for_node" | "waiting_for_instance";

interface JobBase {
  readonly model: string;
  readonly incarnation: string;
  /** When the job entered its state: monotonic (for how long) and wall (shown to people). */
  readonly sinceMs: number;
  readonly sinceWallMs: number;
  readonly actor: string | undefined;
}

/**
 * A load as a job (one per model: loads of a model coalesce on one leader).
 * `waiting` names why no node can take it now; `loading` its node and phase
 * (with bytes when a phase reports them); `failed` why, with the code its
 * callers got, kept a bounded time.
 */
export type LoadJob =
  | (JobBase & { readonly t: "waiting"; readonly phase: WaitingPhase; readonly reason: string })
  | (JobBase & { readonly t: "loading"; readonly phase: Exclude<LoadJobPhase, WaitingPhase>; readonly nodeId: string; readonly bytesDone?: number; readonly bytesTotal?: number; readonly bytesPerSecond?: number; readonly rateFrom?: { readonly ms: number; readonly bytes: number } })
  | (JobBase & { readonly t: "failed"; readonly phase: LoadJobPhase; readonly nodeId: string | undefined; readonly reason: string; readonly code: string });

export interface LoadJobLimits {
  /** Failed jobs kept, oldest dropped first. @default 256 */
  readonly maxFailed: number;
  /** How long a failed job stays listed. @default 600000 (10 min) */
  readonly failedKeepMs: number;
}

export const defaultLoadJobLimits: LoadJobLimits = { maxFailed: 256, failedKeepMs: 600_000 };

export interface JobStamp {
  readonly nowMs: number;
  readonly wallMs: number;
}

/**
 * The loader's load jobs: decision state, pure (the caller passes the clock's
 * readings). Bounded: at most one active job per configured model (a model
 * has at most one load in flight), and at most `maxFailed` failed jobs, each
 * kept `failedKeepMs`. A failed job is replaced by the model's next load.
 * Not replicated: a new leader does not know the old one's jobs — the loads
 * died with it, and the callers' retries start (and list) new ones.
 */
export class LoadJobs {
  private readonly active = new Map<string, LoadJob>();
  /** Insertion order = failure order, so the oldest is first (pruned from the front). */
  private readonly failedJobs = new Map<string, LoadJob>();
  private readonly limits: LoadJobLimits;

  constructor(limits: Partial<LoadJobLimits> = {}) {
    this.limits = { ...defaultLoadJobLimits, ...limits };
  }

  /**
   * The load cannot start now: it waits for `phase`, for `reason`. True when
   * the job just began waiting (the caller emits load.waiting once per job); a
   * later attempt only updates the phase and reason (a load held at the
   * recovery gate that then finds no node is still one waiting job).
   */
  waiting(model: string, incarnation: string, phase: WaitingPhase, reason: string, at: JobStamp, actor: string | undefined): boolean {
    const cur = this.active.get(model);
    if (cur?.t === "waiting" && cur.incarnation === incarnation) {
      if (cur.reason !== reason || cur.phase !== phase) this.active.set(model, { ...cur, phase, reason });
      return false;
    }
    this.failedJobs.delete(model);
    this.active.set(model, { t: "waiting", phase, model, incarnation, reason, sinceMs: at.nowMs, sinceWallMs: at.wallMs, actor });
    return true;
  }

  /** Admitted on `nodeId`, or a later phase of the same load. */
  loading(model: string, incarnation: string, nodeId: string, phase: Exclude<LoadJobPhase, WaitingPhase>, at: JobStamp, actor: string | undefined): void {
    const cur = this.active.get(model);
    if (cur?.t === "loading" && cur.incarnation === incarnation && cur.phase === phase && cur.nodeId === nodeId) return;
    this.failedJobs.delete(model);
    this.active.set(model, { t: "loading", phase, model, incarnation, nodeId, sinceMs: at.nowMs, sinceWallMs: at.wallMs, actor });
  }

  /**
   * Artifact progress of a load admitted on `nodeId`: pulling (bytes so far
   * of all, with the rate since the phase began) or verifying.
   */
  progress(model: string, incarnation: string, nodeId: string, phase: "pulling" | "verifying", bytesDone: number, bytesTotal: number, at: JobStamp, actor: string | undefined): void {
    const cur = this.active.get(model);
    const same = cur?.t === "loading" && cur.incarnation === incarnation && cur.nodeId === nodeId && cur.phase === phase ? cur : undefined;
    const rateFrom = same?.rateFrom ?? { ms: at.nowMs, bytes: bytesDone };
    const elapsedMs = at.nowMs - rateFrom.ms;
    const bytesPerSecond = phase === "pulling" && elapsedMs > 0 ? ((bytesDone - rateFrom.bytes) * 1000) / elapsedMs : 0;
    if (same === undefined) this.failedJobs.delete(model);
    this.active.set(model, { t: "loading", phase, model, incarnation, nodeId, sinceMs: same?.sinceMs ?? at.nowMs, sinceWallMs: same?.sinceWallMs ?? at.wallMs, actor, bytesDone, bytesTotal, bytesPerSecond, rateFrom });
  }

  /** The load failed; returns the phase it failed in. Another load of the model since (a newer incarnation) is left alone. */
  failed(model: string, incarnation: string, nodeId: string | undefined, reason: string, code: string, at: JobStamp, actor: string | undefined): LoadJobPhase {
    const cur = this.active.get(model);
    const phase: LoadJobPhase = cur?.incarnation === incarnation ? cur.phase : nodeId === undefined ? "waiting_for_node" : "starting";
    if (cur !== undefined && cur.incarnation !== incarnation) return phase;
    this.active.delete(model);
    this.failedJobs.delete(model);
    this.failedJobs.set(model, { t: "failed", phase, model, incarnation, nodeId, reason, code, sinceMs: at.nowMs, sinceWallMs: at.wallMs, actor });
    this.prune(at.nowMs);
    return phase;
  }

  /** The load succeeded, or was cancelled on our side (unload, shutdown, a replica no longer needed): no job. */
  done(model: string, incarnation: string): void {
    if (this.active.get(model)?.incarnation === incarnation) this.active.delete(model);
  }

  /** The model's job now, if any. */
  of(model: string, nowMs: number): LoadJob | undefined {
    this.prune(nowMs);
    return this.active.get(model) ?? this.failedJobs.get(model);
  }

  /** Every job now, by model. Linear in jobs (bounded, see the class). */
  list(nowMs: number): LoadJob[] {
    this.prune(nowMs);
    return [...this.active.values(), ...this.failedJobs.values()].sort((a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : 0));
  }

  /** Jobs by state now (a metric's scrape): linear in jobs, bounded (see the class). */
  counts(nowMs: number): Record<LoadJob["t"], number> {
    this.prune(nowMs);
    const out = { waiting: 0, loading: 0, failed: this.failedJobs.size };
    for (const j of this.active.values()) if (j.t !== "failed") out[j.t]++;
    return out;
  }

  get size(): number {
    return this.active.size + this.failedJobs.size;
  }

  /** Drops failed jobs past their keep time or over the cap, oldest first: work proportional to what goes. */
  private prune(nowMs: number): void {
    for (const [model, job] of this.failedJobs) {
      if (this.failedJobs.size <= this.limits.maxFailed && nowMs - job.sinceMs < this.limits.failedKeepMs) break;
      this.failedJobs.delete(model);
    }
  }
}
