import { unchangedChecker } from "../check/unchanged-heartbeat-checker.js";
import type { Event } from "@warden/proto";
import type { HeartbeatReport } from "@warden/cluster";
import type { Lease, StopRequest } from "@warden/loader";
import { runUntil } from "../kernel/run-loop.js";
import { SimWorld } from "../world/sim-world.js";
import { SimCoordinator, type SimCoordinatorHa } from "../coordinator/sim-coordinator.js";
import type { HaCluster } from "../ha/ha-cluster.js";
import type { CheckContext, Checker, PrefixPick, Violation } from "../check/checker.js";
import type { SimOptions } from "./sim-options.js";
import type { AdmissionObservation } from "../../../services/coordinator/src/routing/admission-gate.js";

/**
 * One simulation run's moving parts: the world, the coordinator generation
 * up, the checkers and what they found. The step runner and the fault
 * injector act through it.
 */
export class Harness {
  readonly world: SimWorld;
  coord: SimCoordinator | undefined;
  generation = 0;
  readonly violations: Violation[] = [];
  readonly stopsInFlight = new Map<string, number>();
  readonly ctx: CheckContext;
  /** Heartbeat send times, for checkers that reason about what an inventory could show. */
  private readonly hbSentAt = new WeakMap<HeartbeatReport, number>();
  steps = 0;
  /** A generation is starting (replaying its journal); no second one may start meanwhile. */
  booting = false;
  /** The HA profile's two coordinator processes and lease (undefined: one coordinator, as before). */
  ha: HaCluster | undefined;

  constructor(
    readonly opts: SimOptions,
    readonly checkers: readonly Checker[],
  ) {
    this.world = new SimWorld(opts);
    const self = this;
    this.ctx = {
      world: this.world,
      get coord() {
        return self.coord;
      },
      stopsInFlight: this.stopsInFlight,
      report: (invariant, message) => {
        if (this.violations.length < 20) this.violations.push({ invariant, message, atMs: this.world.clock.now() });
        this.world.log(`VIOLATION ${invariant}: ${message}`);
      },
    };
    const sendHb = this.world.sendHeartbeat.bind(this.world);
    this.world.sendHeartbeat = (agent, hb, onReply) => {
      this.hbSentAt.set(hb, this.world.clock.now());
      sendHb(agent, hb, onReply);
    };
    const deliver = this.world.deliverHeartbeat.bind(this.world);
    this.world.deliverHeartbeat = (agent, hb, onReply) => {
      const before = this.coord?.nodes.get(hb.nodeId);
      const beforeSeq = before?.sequence;
      const beforeEpoch = before?.bootEpoch;
      const beforeHadInventory = before?.inventory !== undefined;
      if (before !== undefined && beforeEpoch === hb.bootEpoch && beforeSeq !== undefined && hb.sequence < beforeSeq) this.world.coverage.hit("fence.stale-inventory-ignored");
      if (before !== undefined && this.world.reportedBackends(hb).some((e) => before.fences.has(e.incarnation))) this.world.coverage.hit("fence.confirmed-stop-hidden");
      deliver(agent, hb, onReply);
      const after = this.coord?.nodes.get(hb.nodeId);
      // A copy of the last applied report (the stale-inventory fault re-delivers one, the network
      // duplicates one) leaves the record carrying its (boot epoch, sequence) too, but Warden ignored
      // it as stale: the record already held that report, so it is no contact (seed 5069: an old
      // boot's last heartbeat re-delivered after the agent restarted counted as n2 heard).
      const already = after === before && beforeEpoch === hb.bootEpoch && beforeSeq === hb.sequence && beforeHadInventory;
      const applied = !already && after !== undefined && after.bootEpoch === hb.bootEpoch && after.sequence === hb.sequence && after.inventory !== undefined;
      const sentAt = this.hbSentAt.get(hb) ?? this.world.clock.now();
      for (const c of this.checkers) c.afterHeartbeat?.(this.ctx, hb, sentAt, applied);
    };
  }

  /**
   * Starts a coordinator generation (the first, or after a crash) and connects the agents' traffic to it.
   * `ha` (HA profile): a leader's generation; `wanted` false once started means its process stepped down
   * or died meanwhile (it is shut down, never connected). A generation the agents no longer follow (a zombie)
   * reaches no checker but the HA ones: its hooks only count.
   */
  async startCoordinator(tornRecords: number, ha?: SimCoordinatorHa, wanted?: () => boolean): Promise<SimCoordinator | undefined> {
    const gen = this.generation++;
    // Hooks run only once the generation exists (its constructor calls none).
    const zombie = (): boolean => ha !== undefined && this.coord !== c && this.startingHa !== c;
    const c = new SimCoordinator(this.world, gen, {
      onEvent: (e: Event) => {
        if (zombie()) return;
        this.onEvent(e);
      },
      onLoaderEvent: (e) => {
        if (zombie()) return;
        for (const ch of this.checkers) ch.onLoaderEvent?.(this.ctx, e);
      },
      onStopSent: (req: StopRequest, nodeId: string) => {
        if (zombie()) {
          this.world.coverage.hit("ha.zombie-stop-sent");
          this.world.log(`zombie stop-sent ${nodeId} ${req.incarnation}`);
          return () => {};
        }
        for (const ch of this.checkers) ch.onStopSent?.(this.ctx, req, nodeId);
        this.stopsInFlight.set(req.incarnation, (this.stopsInFlight.get(req.incarnation) ?? 0) + 1);
        this.world.log(`stop-sent ${nodeId} ${req.incarnation} force=${String(req.force)}`);
        let done = false;
        return () => {
          if (done) return;
          done = true;
          const n = (this.stopsInFlight.get(req.incarnation) ?? 1) - 1;
          if (n <= 0) this.stopsInFlight.delete(req.incarnation);
          else this.stopsInFlight.set(req.incarnation, n);
        };
      },
      checkUnchanged: (nodeId, reconcile) => {
        if (zombie()) {
          reconcile();
          return;
        }
        this.world.coverage.hit("heartbeat.unchanged");
        const checker = unchangedChecker(this.ctx, c, nodeId);
        reconcile();
        checker();
      },
      onStartSent: (nodeId, model, incarnation) => {
        if (zombie()) {
          this.world.coverage.hit("ha.zombie-start-sent");
          this.world.log(`zombie start-sent ${nodeId} ${model} ${incarnation}`);
          return;
        }
        this.world.log(`start-sent ${nodeId} ${model} ${incarnation}`);
        for (const ch of this.checkers) ch.onStartSent?.(this.ctx, nodeId, model, incarnation);
      },
    }, ha);
    if (ha !== undefined) {
      this.startingHa = c;
      // A start that meets a newer leader's records in the stream fails (its appends are fenced): that
      // process's coordinator exits, as the real one does when its outbox cannot start.
      const started = await c.start(tornRecords).then(
        () => true,
        () => {
          this.world.coverage.hit("ha.start-fenced");
          return false;
        },
      );
      if (this.startingHa === c) this.startingHa = undefined;
      if (!started || wanted?.() === false) {
        c.crash();
        return undefined;
      }
      this.coord = c;
      this.world.inbox = c;
      return c;
    }
    this.booting = true;
    // Listens only once started: agents' messages before then find nobody.
    await c.start(tornRecords);
    this.booting = false;
    this.coord = c;
    this.world.inbox = c;
    if (gen > 0) this.world.coverage.hit("coordinator.restarted");
    return c;
  }

  /** HA: the generation being started for the new leader (its recovery events are checked). */
  private startingHa: SimCoordinator | undefined;

  /** HA takeover or step-down: the agents stop following the generation up; it is not killed (a zombie may act on). */
  detachCoordinator(): void {
    if (this.coord === undefined) return;
    this.coord = undefined;
    this.world.inbox = undefined;
    this.stopsInFlight.clear();
    this.world.truth.openRequests.clear();
    this.openCompletions.clear();
    this.world.exitWatchers.clear();
  }

  /** kill -9 of the coordinator: its calls die with it (their leases are nobody's now). */
  crashCoordinator(): void {
    const c = this.coord;
    if (c === undefined) return;
    c.crash();
    this.coord = undefined;
    this.world.inbox = undefined;
    this.stopsInFlight.clear();
    this.world.truth.openRequests.clear();
    this.openCompletions.clear();
    this.world.exitWatchers.clear();
  }

  /** Open calls' completions, for the completion-after-settle fault. */
  readonly openCompletions = new Map<number, () => void>();

  /** Completes a few open calls now (their own completion runs again later: a no-op). */
  completeSomeEarly(r: { chance(p: number): boolean }): void {
    for (const [id, done] of [...this.openCompletions]) {
      if (!r.chance(0.3)) continue;
      this.openCompletions.delete(id);
      done();
      this.world.coverage.hit("lease.completed-twice");
    }
  }

  /** A prefix-routed call's hint picked a replica. */
  onPrefixPick(pick: PrefixPick): void {
    for (const c of this.checkers) c.onPrefixPick?.(this.ctx, pick);
  }

  onLease(lease: Lease): void {
    for (const c of this.checkers) c.onLease?.(this.ctx, lease);
  }

  /** An admission gate let a call in, queued one or saw one leave (the moment the queue chose). */
  onAdmission(o: AdmissionObservation, gate: number): void {
    for (const c of this.checkers) c.onAdmission?.(this.ctx, o, gate);
  }

  private onEvent(e: Event): void {
    const p = e.payload;
    if (p.case !== undefined) this.world.log(`event ${p.case} ${e.nodeId} ${e.incarnation}${p.case === "evictionRetried" || p.case === "evictionFailed" ? ` ${p.value.error}` : ""}`);
    for (const c of this.checkers) c.onEvent?.(this.ctx, e);
  }

  async run(untilMs: number): Promise<void> {
    this.steps += await runUntil(
      this.world.queue,
      this.world.clock,
      untilMs,
      {
        afterStep: (label) => {
          for (const c of this.checkers) c.afterStep?.(this.ctx, label);
        },
        onThrow: (label, err) => {
          this.ctx.report("decision code threw", `${label}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
        },
        shouldStop: () => this.violations.length > 0,
      },
      this.world.stall,
    );
  }

  /** No violation so far. */
  clean(): boolean {
    return this.violations.length === 0;
  }

  quiescenceChecks(): void {
    for (const c of this.checkers) c.atQuiescence?.(this.ctx);
  }
}
