import { Code, WardenError } from "@warden/common";
import type { SimRandom } from "../kernel/sim-random.js";
import type { SimCoordinator, SimCoordinatorHa } from "../coordinator/sim-coordinator.js";
import type { Harness } from "../run/harness.js";
import { defaultHaWorld, type HaFault, type HaOptions, type HaWorld } from "./ha-profile.js";
import { HaMember } from "./ha-member.js";
import { SimLeaseStore } from "./sim-lease-store.js";

/** A coordinator process's own links to the agents (fault: the leader cut off from some of them). */
class ProcessLinks {
  private readonly heldUntil = new Map<string, number>();
  constructor(private readonly now: () => number) {}
  heldUntilMs(nodeId: string): number {
    return this.heldUntil.get(nodeId) ?? 0;
  }
  cutFrom(nodeId: string): boolean {
    return this.heldUntilMs(nodeId) > this.now();
  }
  cut(nodeId: string, untilMs: number): void {
    this.heldUntil.set(nodeId, Math.max(this.heldUntilMs(nodeId), untilMs));
  }
  healAll(): void {
    this.heldUntil.clear();
  }
}

interface Process {
  readonly member: HaMember;
  readonly links: ProcessLinks;
  coord: SimCoordinator | undefined;
  epoch: number;
}

/**
 * Two coordinator processes sharing the lease key, the journal stream and the
 * agents (the HA profile). Each runs a lease keeper; the one the core makes
 * leader builds a coordinator generation from the shared journal with
 * leaderEpoch = the won revision, and the agents follow it (their heartbeats
 * go to it from then on). A process told to step down shuts its generation
 * down. A process the standby superseded while it was stopped or cut off
 * keeps its generation until its own lease tick steps it down: a zombie, whose
 * late commands the agents' fences must refuse.
 */
export class HaCluster {
  readonly store: SimLeaseStore;
  readonly processes: (Process | undefined)[] = [undefined, undefined];
  /** Epochs won, in order (checker 4: strictly increasing). */
  readonly epochs: number[] = [];
  private incarnations = 0;
  private readonly real: HaWorld;
  /** The world's own draws (followers' delays, keeper lags), apart from the faults' streams. */
  private readonly rw: SimRandom;
  /** The process that led last (agents already connected to it follow a re-win at once). */
  private lastLeader: Process | undefined;
  /**
   * Checker HA 10: a stream leader change while a healthy process leads, with no other HA fault
   * until `untilMs`, must not move the leadership (the leader resumes in place).
   */
  private keepLeader: { readonly holder: string; untilMs: number; clean: boolean; readonly lostWrites: number } | undefined;

  constructor(
    private readonly h: Harness,
    readonly o: HaOptions,
  ) {
    const w = h.world;
    this.store = new SimLeaseStore(w.queue, w.clock, w.rng.fork("ha-lease"), () => { w.coverage.hit("ha.lease-double-accept"); }, () => { w.coverage.hit("ha.lease-writes-lost"); });
    this.real = o.world ?? defaultHaWorld;
    this.rw = w.rng.fork("ha-world");
    w.epochInForce = () => BigInt(this.maxEpoch());
  }

  start(): void {
    this.spawn(0);
    this.spawn(1);
  }

  maxEpoch(): number {
    return this.epochs[this.epochs.length - 1] ?? 0;
  }

  private spawn(index: number): void {
    const w = this.h.world;
    const links = new ProcessLinks(() => w.clock.now());
    const holder = `coord-${String(index)}-${String(++this.incarnations)}`;
    const p: Process = {
      links,
      coord: undefined,
      epoch: 0,
      member: new HaMember(w, this.store, index, holder, this.o, {
        becomeLeader: (m, epoch) => { this.becomeLeader(p, m, epoch); },
        stepDown: (_m, epoch, reason) => { this.stepDown(p, epoch, reason); },
      }),
    };
    this.processes[index] = p;
  }

  private becomeLeader(p: Process, m: HaMember, epoch: number): void {
    const h = this.h;
    const w = h.world;
    const last = this.maxEpoch();
    if (epoch <= last) h.ctx.report("HA 4 epochs increase", `${m.holder} won epoch ${String(epoch)} after epoch ${String(last)}`);
    this.epochs.push(epoch);
    w.log(`ha leader ${m.holder} epoch ${String(epoch)}`);
    if (this.epochs.length > 1) w.coverage.hit("ha.takeover");
    const kept = this.keepLeader;
    // A change that lost acknowledged writes of the key is more than a lost server: the leader's own key may be gone.
    if (kept !== undefined && kept.clean && kept.lostWrites === this.store.lostWrites && w.clock.now() <= kept.untilMs) {
      if (m.holder === kept.holder) w.coverage.hit("ha.resumed-after-stream-leader-change");
      else h.ctx.report("HA 10 a lost stream server keeps the leader", `${m.holder} won epoch ${String(epoch)} from ${kept.holder}, which led and had no fault but a lease-stream leader change`);
    }
    p.epoch = epoch;
    // Agents find a new leader only after a while (each its own), trying the addresses they know.
    if (this.lastLeader !== undefined && this.lastLeader !== p && this.real.followMaxMs > 0) {
      for (const n of w.opts.nodes) w.followFromMs.set(n.nodeId, w.clock.now() + this.rw.int(0, this.real.followMaxMs));
    }
    this.lastLeader = p;
    const old = h.coord;
    const before = old?.outbox.openStopIntents() ?? [];
    // The agents follow the new leader: the old generation keeps running (a zombie, if it still can) but nobody listens to it.
    if (old !== undefined) h.detachCoordinator();
    // The term's lease held at this moment, by the core's isLeaderAt on the process's own clock (ha-runner.ts `held`).
    const held = (): boolean => p.epoch === epoch && m.leadingNow();
    const ha: SimCoordinatorHa = {
      epoch: BigInt(epoch),
      leaderEpoch: () => {
        if (!held()) throw new WardenError(Code.Unavailable, "not the leader: lease lost, no quorum");
        return BigInt(epoch);
      },
      mayAct: held,
      journalFence: {
        writerEpoch: () => (held() ? BigInt(epoch) : undefined),
        // The runner steps down when its journal says a newer epoch wrote.
        onSuperseded: () => {
          if (p.epoch === epoch) this.stepDown(p, epoch, "journal-superseded");
        },
      },
      pausedUntil: () => m.pausedUntilMs,
      link: p.links,
    };
    void h.startCoordinator(0, ha, () => p.member.alive() && p.epoch === epoch).then((c) => {
      if (c === undefined) {
        // Its start failed while it still holds the lease: the process exits and comes back as a standby.
        if (p.member.alive() && p.epoch === epoch) {
          this.kill(p);
          const index = m.index;
          w.queue.push(w.clock.now() + 1_000, "ha.restart", () => {
            if (this.processes[index]?.member.alive() !== true) this.spawn(index);
          });
        }
        return;
      }
      p.coord = c;
      // Every stop intent the old leader had stored in the shared stream is carried over. (An intent it
      // issued while its lease was not held waits, unsent, and its StopBackend with it: the epoch fence
      // keeps it out of the stream, and a new leader rightly knows nothing of it — seed 717, --ha on.)
      // (A clear the old leader issued is in the stream from its issue too, acknowledged or not: that intent is rightly gone.)
      const now = new Set(c.outbox.openStopIntents().map((i) => i.incarnation));
      const cleared = w.disk.clearedIntents();
      const stored = w.disk.storedIntents();
      const lost = before.filter((i) => stored.has(i.incarnation) && !now.has(i.incarnation) && !cleared.has(i.incarnation));
      if (lost.length > 0) h.ctx.report("HA 3 intents carried over", `${m.holder} (epoch ${String(epoch)}) took over without the old leader's stop intents ${lost.map((i) => i.incarnation).join(", ")}`);
      w.coverage.hit("ha.generation-started");
    });
  }

  private stepDown(p: Process, epoch: number, reason: string): void {
    const h = this.h;
    const w = h.world;
    w.log(`ha step-down ${p.member.holder} epoch ${String(epoch)} ${reason}`);
    w.coverage.hit(`ha.step-down.${reason}`);
    p.epoch = 0;
    const c = p.coord;
    p.coord = undefined;
    if (c === undefined) return;
    // The runner shuts the coordinator down on step-down (nothing of it acts afterwards).
    if (h.coord === c) h.detachCoordinator();
    c.crash();
  }

  /** The process whose generation the agents follow now. */
  leader(): Process | undefined {
    return this.processes.find((p) => p !== undefined && p.coord !== undefined && p.coord === this.h.coord);
  }

  /**
   * HA 10's window: from a stream leader change while `p` leads healthily (alive, not paused, not
   * cut off from the lease) until three leases after the election ends; any other fault in it
   * takes the window out of the check (a crash or pause may rightly move the leadership).
   */
  private watchLeaderKept(fault: HaFault, p: Process, now: number, durationMs: number): void {
    const kept = this.keepLeader;
    const open = kept !== undefined && now <= kept.untilMs;
    if (fault !== "stream-leader-change") {
      if (open) kept.clean = false;
      return;
    }
    const healthy = p.coord !== undefined && p.member.leadingNow() && p.member.pausedUntilMs <= now && this.store.reachable(p.member.index);
    const untilMs = now + durationMs + 3 * this.o.leaseMs;
    if (open) {
      kept.untilMs = Math.max(kept.untilMs, untilMs);
      if (!healthy || kept.holder !== p.member.holder) kept.clean = false;
      return;
    }
    this.keepLeader = { holder: p.member.holder, untilMs, clean: healthy, lostWrites: this.store.lostWrites };
  }

  /** kill -9 of the leader's process (also what the coordinator-crash faults do in this profile). */
  crashLeader(r: SimRandom, downMs: number): void {
    if (this.keepLeader !== undefined) this.keepLeader.clean = false;
    const p = this.leader() ?? this.processes.find((x) => x !== undefined && x.member.alive());
    if (p === undefined) return;
    const w = this.h.world;
    w.coverage.hit("ha.leader-crash");
    this.kill(p);
    const index = p.member.index;
    w.queue.push(w.clock.now() + downMs + r.int(0, 1_000), "ha.restart", () => {
      if (this.processes[index]?.member.alive() !== true) this.spawn(index);
    });
  }

  private kill(p: Process): void {
    const h = this.h;
    h.world.log(`ha kill ${p.member.holder}`);
    p.member.kill();
    const c = p.coord;
    p.coord = undefined;
    if (c !== undefined) {
      if (h.coord === c) h.crashCoordinator();
      else c.crash();
    }
  }

  /** One HA fault on the leader (or whichever process is up). */
  inject(fault: HaFault, durationMs: number, r: SimRandom): void {
    const w = this.h.world;
    const now = w.clock.now();
    const p = this.leader() ?? this.processes.find((x) => x !== undefined && x.member.alive());
    if (p === undefined) return;
    this.watchLeaderKept(fault, p, now, durationMs);
    switch (fault) {
      case "leader-crash":
        this.crashLeader(r, durationMs);
        return;
      case "leader-pause":
        w.coverage.hit("ha.pause");
        p.member.pausedUntilMs = Math.max(p.member.pausedUntilMs, now + durationMs);
        p.member.keeperLagMs = this.real.keeperLagMaxMs > 0 ? this.rw.int(1, this.real.keeperLagMaxMs) : 0;
        return;
      case "stream-leader-change":
        w.coverage.hit("ha.stream-leader-change");
        // The stale window spans a lease: in a two-process cluster the two candidates' writes on one
        // revision come about a lease apart (each counts a whole lease from what it last saw);
        // with three members they came in the same millisecond.
        this.store.leaderChange(durationMs, r.int(this.o.leaseMs, 2 * this.o.leaseMs), this.real.leaderChangeLosesWrites !== false);
        return;
      case "lease-partition":
        w.coverage.hit("ha.lease-partition");
        this.store.cut(p.member.index, now + durationMs);
        // Sometimes the agents lose it too, so its late commands meet a fence raised by the new leader.
        if (r.chance(0.3)) for (const n of w.opts.nodes) if (r.chance(0.5)) p.links.cut(n.nodeId, now + durationMs);
        return;
      case "leader-agent-partition":
        w.coverage.hit("ha.agent-partition");
        for (const n of w.opts.nodes) if (r.chance(0.5)) p.links.cut(n.nodeId, now + durationMs);
        if (r.chance(0.5)) {
          p.member.pausedUntilMs = Math.max(p.member.pausedUntilMs, now + r.int(1_000, durationMs));
          p.member.keeperLagMs = this.real.keeperLagMaxMs > 0 ? this.rw.int(1, this.real.keeperLagMaxMs) : 0;
        }
        return;
    }
  }

  /** Quiescence: every process resumes and reconnects; a dead one comes back as a standby. */
  endFaults(): void {
    const now = this.h.world.clock.now();
    this.store.healAll();
    for (const [i, p] of this.processes.entries()) {
      if (p === undefined || !p.member.alive()) {
        this.spawn(i);
        continue;
      }
      p.links.healAll();
      if (p.member.pausedUntilMs > now) p.member.pausedUntilMs = now;
    }
  }

  /** Processes acting as leader by the core's own rule at this instant, each on its own clock. */
  leadersNow(): string[] {
    return this.processes.filter((p) => p !== undefined && p.member.leadingNow()).map((p) => p?.member.holder ?? "");
  }
}
