import { allCheckers } from "../check/all-checkers.js";
import type { Violation } from "../check/checker.js";
import { applyPlantedBug, clearPlantedBug } from "../coordinator/planted-bug.js";
import { Harness } from "./harness.js";
import { makePlan, type Step } from "./plan.js";
import { optionsForSeed, type SimOptions, type SimProfile } from "./sim-options.js";
import { schedulePlan } from "./step-runner.js";
import { HaCluster } from "../ha/ha-cluster.js";
import { haCheckers } from "../check/ha-checkers.js";
import { haWorldCheckers } from "../check/ha-world-checkers.js";

export interface SeedResult {
  readonly seed: number;
  readonly violations: readonly Violation[];
  readonly simulatedMs: number;
  readonly steps: number;
  readonly traceHash: number;
  readonly coverage: Record<string, number>;
  readonly trace: readonly string[];
}

export interface RunSeedOptions {
  /** Run this plan instead of the seed's own (shrinking). */
  readonly plan?: readonly Step[];
  readonly keepTrace?: boolean;
  readonly overrides?: Partial<SimOptions>;
  /** @default "short" */
  readonly profile?: SimProfile;
}

/**
 * Runs one seed: the faulty phase (workload and faults), then a fault-free
 * quiescence phase (partitions healed, agents up, NATS up, no new calls) after
 * which convergence and audit completeness are checked. Deterministic: the
 * same seed, plan and options give the same trace hash.
 */
export async function runSeed(seed: number, o: RunSeedOptions = {}): Promise<SeedResult> {
  const opts = optionsForSeed(seed, o.overrides, o.profile);
  const plan = o.plan ?? makePlan(opts);
  applyPlantedBug(opts.plantedBug);
  try {
    const checkers = allCheckers();
    const h = new Harness(opts, checkers);
    const w = h.world;
    w.keepTrace = o.keepTrace === true;
    if (opts.ha !== undefined) {
      const ha = new HaCluster(h, opts.ha);
      h.ha = ha;
      checkers.push(...haCheckers(ha), ...haWorldCheckers(ha));
      ha.start();
    } else void h.startCoordinator(0);
    for (const a of w.agents.values()) a.boot();
    schedulePlan(h, plan);
    await h.run(opts.durationMs);
    if (h.clean()) {
      endFaults(h);
      // From where the faulty phase really ended: stalls (F15) can push the clock past durationMs.
      await h.run(w.clock.now() + opts.quiesceMs);
      // A policy stop (idle, busy, pressure) may start at any moment of the quiet
      // phase: convergence is judged once the stops in flight have answered
      // (each is bounded by the stop RPC deadline) and the events they emitted
      // are journaled and published — never mid-stop or mid-fsync. A stop that
      // failed there (its reply lost to the link's own loss) leaves a leftover,
      // reaped or stopped again within a retry and two inventories: that is
      // waited for too (seed 4153). Bounded: a stop, a leftover or an outbox
      // that never settles is still reported.
      const settleByMs = w.clock.now() + 2 * (opts.stopRpcTimeoutMs + opts.sigtermGraceMs) + 4 * opts.heartbeatMs + 10_000;
      // The replica reconciler may start a floor load at any moment of the quiet phase too: it is
      // waited for like a stop (seed 481, replicas on: a load started 1 s before the check).
      // and a floor is restored one load per tick: a model below min with its breaker closed is still converging.
      const loading = (): boolean =>
        (h.coord?.loader.heldInstances().some((x) => x.phase !== "ready") ?? false) || (h.coord?.loader.replicaStatuses().some((s) => s.ready + s.loading < s.settings.min && s.blocked === undefined) ?? false);
      // HA: a takeover may still be under way (no leader's generation up yet).
      const unsettled = (): boolean => (h.ha !== undefined && h.coord === undefined) || h.stopsInFlight.size > 0 || (h.coord?.outbox.stats().depth ?? 0) > 0 || (h.coord?.loader.leftoverList().length ?? 0) > 0 || loading();
      while (h.clean() && unsettled() && w.clock.now() < settleByMs) await h.run(w.clock.now() + 500);
      if (h.clean()) h.quiescenceChecks();
    }
    return { seed, violations: h.violations, simulatedMs: w.clock.now(), steps: h.steps, traceHash: w.traceHash, coverage: w.coverage.toJSON(), trace: w.trace };
  } finally {
    clearPlantedBug();
  }
}

/** Faults stop: links heal, agents come back (records kept), NATS returns, nothing is stuck or slow. */
function endFaults(h: Harness): void {
  const w = h.world;
  const now = w.clock.now();
  w.log("quiesce");
  w.net.healAll();
  w.nats.ackLossP = 0;
  if (w.nats.downUntilMs > now) w.nats.outage(now);
  w.nats.downUntilMs = 0;
  w.slowUntilMs = 0;
  w.crashUntilMs = 0;
  for (const p of w.truth.live()) p.unkillableUntilMs = 0;
  for (const a of w.agents.values()) {
    a.flapUntilMs = 0;
    a.slowStopsUntilMs = 0;
    if (!a.up) a.restart(true);
    else if (a.pausedUntilMs > now) a.pause(now);
  }
  if (h.ha !== undefined) h.ha.endFaults();
  else if (h.coord === undefined && !h.booting) {
    const torn = w.disk.crash();
    void h.startCoordinator(torn);
  }
}
