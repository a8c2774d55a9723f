import { Code, WardenError } from "@warden/common";
import { initialLease, isLeaderAt, leaseConfig, nextLease, type LeaseConfig, type LeaseEffect, type LeaseInput, type LeaseState } from "@warden/lease";
import { ScopedClock } from "../coordinator/scoped-clock.js";
import type { SimWorld } from "../world/sim-world.js";
import type { HaOptions } from "./ha-profile.js";
import type { KV } from "@nats-io/kv";
import { LeaseClaims, LeaseTakenError } from "../../../services/coordinator/src/ha/lease-claim.js";
import type { LeaseWriteResult, SimLeaseStore } from "./sim-lease-store.js";

/** A compare-and-set refusal from the simulated bucket (wrong last sequence). */
const wrongRevision = new WardenError(Code.FailedPrecondition, "wrong last sequence");

/** What the member tells the cluster when the lease core says so. */
export interface MemberEvents {
  becomeLeader(m: HaMember, epoch: number): void;
  stepDown(m: HaMember, epoch: number, reason: string): void;
}

/**
 * One coordinator process's lease keeper (services/coordinator/src/ha/lease-keeper.ts):
 * the REAL pure core (`nextLease`, `isLeaderAt`) fed with the key as watched and
 * the answers of its writes, one write in flight with a deadline, a tick at the
 * core's `wakeAtMs`. Its clock is its own: offset and rate drift from the
 * simulation's time, so every `nowMs` the core sees is local. A SIGSTOP defers
 * its timers and deliveries (the process clock), a kill -9 ends them.
 */
export class HaMember {
  readonly config: LeaseConfig;
  state: LeaseState;
  readonly clock: ScopedClock;
  pausedUntilMs = 0;
  /**
   * After a pause, how much later than the process's other timers the lease
   * keeper's own queued work runs (its tick, then a KV round trip before it
   * knows): the coordinator's stale timers run first, as they do for real.
   */
  keeperLagMs = 0;
  private pendingWrite = 0;
  private writes = 0;
  private probing = false;
  private cancelTick: (() => void) | undefined;
  /** The keeper's takeover claims (lease-claim.ts), one per process: it remembers when it first saw each claim. */
  private readonly claims: LeaseClaims;

  constructor(
    private readonly w: SimWorld,
    private readonly store: SimLeaseStore,
    readonly index: number,
    readonly holder: string,
    private readonly o: HaOptions,
    private readonly events: MemberEvents,
  ) {
    this.config = leaseConfig(holder, { leaseMs: o.leaseMs, renewMs: o.renewMs, marginMs: o.marginMs, retryMs: o.retryMs });
    this.clock = new ScopedClock(w.clock, () => (this.pausedUntilMs > 0 ? this.pausedUntilMs + this.keeperLagMs : 0));
    this.claims = new LeaseClaims({ kv: this.kv(), key: "leader", clock: { now: () => this.localNow() }, staleAfterMs: o.leaseMs });
    const first = initialLease();
    this.state = first.state;
    this.clock.run(() => { this.apply(first.effects, first.wakeAtMs); });
    this.probe();
  }

  /** The keeper's read after a refused update (lease-keeper.ts `checkRewound`): a key older than the revision written from went back. */
  private checkRewound(expectedRevision: number): void {
    this.store.get(this.index, (revision, holder) => {
      this.clock.run(() => {
        if (revision < expectedRevision) this.input({ kind: "entry", revision, holder, nowMs: this.localNow(), rewound: true });
      });
    });
  }

  /** The keeper's follower probe (lease-keeper.ts `scheduleProbe`): a read each renewMs; no answer within the op deadline is read-failed. */
  private probe(): void {
    this.clock.setTimer(this.o.renewMs, () => {
      this.probe();
      if (this.probing || this.state.kind !== "follower") return;
      this.probing = true;
      let answered = false;
      this.store.get(this.index, (revision, holder) => {
        this.clock.run(() => {
          if (answered) return;
          answered = true;
          this.probing = false;
          this.input({ kind: "entry", revision, holder, nowMs: this.localNow() });
        });
      });
      this.clock.setTimer(this.o.opTimeoutMs, () => {
        if (answered) return;
        answered = true;
        this.probing = false;
        this.input({ kind: "read-failed", nowMs: this.localNow() });
      });
    });
  }

  /** This process's own clock reading (what the core compares). */
  localNow(): number {
    const rate = this.o.driftRates[this.index] ?? 0;
    return (this.o.clockOffsetsMs[this.index] ?? 0) + this.w.clock.now() * (1 + rate);
  }

  /** True while the core says this process may act as leader, on its own clock. */
  leadingNow(): boolean {
    return this.clock.alive() && isLeaderAt(this.config, this.state, this.localNow());
  }

  alive(): boolean {
    return this.clock.alive();
  }

  kill(): void {
    this.clock.kill();
    this.store.unwatch(this.index);
  }

  private input(i: LeaseInput): void {
    const s = nextLease(this.config, this.state, i);
    this.state = s.state;
    this.apply(s.effects, s.wakeAtMs);
  }

  /**
   * A takeover as the keeper makes it (lease-keeper.ts): the REAL
   * `LeaseClaims.take` (claim chain, then the update) over this process's link
   * to the store, under the keeper's op deadline, then the key read back
   * through the stream leader before the win is acted on — the core hears the
   * key first and refuses a win someone else's write follows.
   */
  private takeover(expectedRevision: number, id: number, signal: AbortSignal, answer: (i: LeaseInput) => void): void {
    this.claims.take(this.holder, expectedRevision, this.o.opTimeoutMs, signal).then(
      (revision) => {
        this.store.get(this.index, (seenRevision, holder) => {
          this.clock.run(() => {
            if (this.pendingWrite !== id) return;
            this.input({ kind: "entry", revision: seenRevision, holder, nowMs: this.localNow() });
            answer({ kind: "write-ok", revision, nowMs: this.localNow() });
          });
        });
      },
      (err: unknown) => {
        this.clock.run(() => {
          const refused = err === wrongRevision || err instanceof LeaseTakenError;
          answer(refused ? { kind: "write-wrong-revision", nowMs: this.localNow() } : { kind: "write-failed", nowMs: this.localNow() });
          if (refused) this.checkRewound(expectedRevision);
        });
      },
    );
  }

  /** The lease bucket as the keeper's KV client sees it, over this process's link (claim keys and the lease key). */
  private kv(): KV {
    const call = (f: (done: (r: LeaseWriteResult) => void) => void): Promise<number> =>
      new Promise<number>((resolve, reject) => {
        f((r) => {
          if (r.t === "ok") resolve(r.revision);
          else reject(wrongRevision);
        });
      });
    const kv = {
      get: (key: string) =>
        new Promise((resolve) => {
          this.store.getClaim(this.index, key, (c) => {
            resolve(c === null ? null : { revision: c.revision, operation: "PUT", json: () => ({ holder: c.holder }) });
          });
        }),
      put: (key: string) => call((done) => { this.store.claim(this.index, key, this.holder, done); }),
      update: (_key: string, _value: string, revision: number) => call((done) => { this.store.write(this.index, "update", revision, this.holder, done); }),
    };
    return kv as unknown as KV;
  }

  private apply(effects: readonly LeaseEffect[], wakeAtMs: number | undefined): void {
    for (const e of effects) {
      switch (e.kind) {
        case "create":
        case "update": {
          const id = ++this.writes;
          this.pendingWrite = id;
          const answer = (i: LeaseInput): void => {
            if (this.pendingWrite !== id) return; // a late answer: the keeper dropped the call at its deadline
            this.pendingWrite = 0;
            this.input(i);
          };
          if (e.kind === "update" && this.state.kind !== "leader") {
            const deadline = new AbortController();
            this.takeover(e.expectedRevision, id, deadline.signal, answer);
            this.clock.setTimer(this.o.opTimeoutMs, () => {
              deadline.abort(new WardenError(Code.DeadlineExceeded, "lease takeover: deadline exceeded"));
              answer({ kind: "write-failed", nowMs: this.localNow() });
            });
            break;
          }
          this.store.write(this.index, e.kind, e.kind === "update" ? e.expectedRevision : 0, this.holder, (r) => {
            this.clock.run(() => {
              answer(r.t === "ok" ? { kind: "write-ok", revision: r.revision, nowMs: this.localNow() } : { kind: "write-wrong-revision", nowMs: this.localNow() });
              if (r.t !== "ok" && e.kind === "update") this.checkRewound(e.expectedRevision);
            });
          });
          this.clock.setTimer(this.o.opTimeoutMs, () => { answer({ kind: "write-failed", nowMs: this.localNow() }); });
          break;
        }
        case "watch":
          this.store.watch(this.index, (revision, holder) => {
            this.clock.run(() => { this.input({ kind: "entry", revision, holder, nowMs: this.localNow() }); });
          });
          break;
        case "become-leader":
          this.events.becomeLeader(this, e.epoch);
          break;
        case "step-down":
          this.events.stepDown(this, e.epoch, e.reason);
          break;
      }
    }
    this.cancelTick?.();
    this.cancelTick = undefined;
    if (wakeAtMs !== undefined) {
      const rate = this.o.driftRates[this.index] ?? 0;
      const delayMs = Math.max(0, (wakeAtMs - this.localNow()) / (1 + rate));
      // +1 ms: the local reading at the real instant must have reached wakeAtMs (floating point).
      this.cancelTick = this.clock.setTimer(delayMs + 1, () => {
        this.cancelTick = undefined;
        this.input({ kind: "tick", nowMs: this.localNow() });
      });
    }
  }
}
