import { backoffDelayMs, leftoverBackoff, type BackoffPolicy, type Cancel, type Clock, type Rng } from "@warden/common";
import type { OccupancyEntry } from "@warden/watchdog";

/**
 * A leftover (DESIGN §1, §3.3): an instance whose stop failed after its local
 * half was dropped. Still running on its node, accounted there, never routed
 * to, its stop retried until the agent confirms it gone.
 */
export interface Leftover {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  readonly address: string;
  readonly groups: readonly string[];
  readonly sizeBytes: number;
  readonly sinceMs: number;
  readonly sinceWallMs: number;
  attempts: number;
  lastError: string;
  stuck: boolean;
}

export interface LeftoverTrackerOptions {
  readonly clock: Clock;
  readonly rng: Rng;
  /** @default DESIGN §5: 1 s × 1.6 up to 60 s, 20 % jitter */
  readonly backoff?: BackoffPolicy;
  /** @default 15 min */
  readonly stuckAfterMs?: number;
  /** HA: false while this coordinator is not the leader; a due retry is then rescheduled, not attempted. @default always true */
  readonly mayAct?: () => boolean;
  /** Runs one retry of the stop; resolves true when the agent confirmed it gone. */
  readonly retry: (leftover: Leftover) => Promise<{ readonly gone: true } | { readonly gone: false; readonly error: string }>;
  /** Called whenever the set of leftovers on a node changes. */
  readonly onNodeChanged: (nodeId: string) => void;
  readonly onRetried: (leftover: Leftover) => void;
  readonly onStuck: (leftover: Leftover) => void;
  readonly onReaped: (leftover: Leftover) => void;
}

/**
 * Owns every leftover: the per-node index, the retry timers (capped backoff
 * with jitter, forever), the `stuck` flag after 15 min. One owner: only this
 * class mutates leftover records.
 */
export class LeftoverTracker {
  private readonly byIncarnation = new Map<string, Leftover>();
  private readonly byNode = new Map<string, Set<string>>();
  private readonly timers = new Map<string, Cancel>();
  private readonly running = new Set<string>();
  /** Incarnations whose attempt came while one was running: retried once that one settles. */
  private readonly rerun = new Set<string>();
  private readonly backoff: BackoffPolicy;
  private readonly stuckAfterMs: number;
  private closed = false;

  constructor(private readonly o: LeftoverTrackerOptions) {
    this.backoff = o.backoff ?? leftoverBackoff;
    this.stuckAfterMs = o.stuckAfterMs ?? 15 * 60_000;
  }

  get size(): number {
    return this.byIncarnation.size;
  }

  get(incarnation: string): Leftover | undefined {
    return this.byIncarnation.get(incarnation);
  }

  list(): Leftover[] {
    return [...this.byIncarnation.values()];
  }

  /** Leftovers of one model, on any node (UnloadModel; a full scan, never on a hot path). */
  ofModel(model: string): Leftover[] {
    const out: Leftover[] = [];
    for (const l of this.byIncarnation.values()) if (l.model === model) out.push(l);
    return out;
  }

  /** Leftovers of one node, from the per-node index (a heartbeat's reconcile). */
  onNode(nodeId: string): Leftover[] {
    const out: Leftover[] = [];
    for (const inc of this.byNode.get(nodeId) ?? []) {
      const l = this.byIncarnation.get(inc);
      if (l !== undefined) out.push(l);
    }
    return out;
  }

  /** The nodes holding at least one leftover. */
  nodes(): string[] {
    return [...this.byNode.keys()];
  }

  /** Occupancy entries of a node's leftovers, for the watchdog. */
  occupancy(nodeId: string): OccupancyEntry[] {
    const out: OccupancyEntry[] = [];
    for (const inc of this.byNode.get(nodeId) ?? []) {
      const l = this.byIncarnation.get(inc);
      if (l !== undefined) out.push({ kind: "leftover", key: l.incarnation, model: l.model, groups: l.groups, sizeBytes: l.sizeBytes });
    }
    return out;
  }

  /** Adds a leftover and schedules its first retry. Adding an existing one is a no-op. */
  add(init: Omit<Leftover, "attempts" | "lastError" | "stuck" | "sinceMs" | "sinceWallMs"> & { readonly lastError: string }): Leftover {
    const existing = this.byIncarnation.get(init.incarnation);
    if (existing !== undefined) return existing;
    const l: Leftover = { ...init, sinceMs: this.o.clock.now(), sinceWallMs: this.o.clock.wallNow(), attempts: 0, stuck: false };
    this.byIncarnation.set(l.incarnation, l);
    let set = this.byNode.get(l.nodeId);
    if (set === undefined) {
      set = new Set();
      this.byNode.set(l.nodeId, set);
    }
    set.add(l.incarnation);
    this.o.onNodeChanged(l.nodeId);
    this.schedule(l);
    return l;
  }

  /** Removes a leftover (reaped, reported gone, or forgotten by an operator). */
  remove(incarnation: string): Leftover | undefined {
    const l = this.byIncarnation.get(incarnation);
    if (l === undefined) return undefined;
    this.byIncarnation.delete(incarnation);
    this.byNode.get(l.nodeId)?.delete(incarnation);
    if (this.byNode.get(l.nodeId)?.size === 0) this.byNode.delete(l.nodeId);
    this.timers.get(incarnation)?.();
    this.timers.delete(incarnation);
    this.o.onNodeChanged(l.nodeId);
    return l;
  }

  /** Retries every leftover of a node now (e.g. when it comes back). */
  retryNodeNow(nodeId: string): void {
    for (const inc of this.byNode.get(nodeId) ?? []) {
      const l = this.byIncarnation.get(inc);
      if (l === undefined) continue;
      this.timers.get(inc)?.();
      this.timers.delete(inc);
      void this.attempt(l);
    }
  }

  close(): void {
    this.closed = true;
    for (const c of this.timers.values()) c();
    this.timers.clear();
  }

  private schedule(l: Leftover): void {
    if (this.closed) return;
    const delayMs = backoffDelayMs(this.backoff, l.attempts, this.o.rng);
    this.timers.set(
      l.incarnation,
      this.o.clock.setTimer(delayMs, () => {
        this.timers.delete(l.incarnation);
        void this.attempt(l);
      }),
    );
  }

  private async attempt(l: Leftover): Promise<void> {
    if (this.closed) return;
    if (this.o.mayAct?.() === false) {
      // Not the leader now (HA): not an attempt; looked at again after the same back-off.
      if (!this.timers.has(l.incarnation)) this.schedule(l);
      return;
    }
    if (this.running.has(l.incarnation)) {
      // One attempt at a time; this one is not lost — the running attempt may
      // belong to a record removed meanwhile (forgotten, then re-adopted), which
      // would otherwise leave the current record with no retry ever again.
      this.rerun.add(l.incarnation);
      return;
    }
    this.running.add(l.incarnation);
    try {
      const r = await this.o.retry(l).catch((err: unknown) => ({ gone: false as const, error: err instanceof Error ? err.message : String(err) }));
      if (this.byIncarnation.get(l.incarnation) !== l) return; // removed meanwhile
      l.attempts++;
      if (r.gone) {
        this.remove(l.incarnation);
        this.o.onReaped(l);
        return;
      }
      l.lastError = r.error;
      this.o.onRetried(l);
      if (!l.stuck && this.o.clock.now() - l.sinceMs >= this.stuckAfterMs) {
        l.stuck = true;
        this.o.onStuck(l);
      }
      this.schedule(l);
    } finally {
      this.running.delete(l.incarnation);
      if (this.rerun.delete(l.incarnation)) {
        const current = this.byIncarnation.get(l.incarnation);
        if (current !== undefined && !this.timers.has(l.incarnation)) this.schedule(current);
      }
    }
  }
}
