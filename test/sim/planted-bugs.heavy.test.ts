import { plantedBugNames, type PlantedBug } from "@warden/common/testing/planted-bugs";
import { describe, expect, it } from "vitest";
import { runWithBug, type SeedOutcome } from "./planted-bug-runs.js";
import type { SimOptions } from "./run/sim-options.js";

/**
 * Test the tester: each planted bug, switched on in the
 * production code, is caught by the simulation on its recorded seed — and the
 * same seed without the bug reports nothing. The seeds were found with
 * `node --import tsx test/sim/planted-bug-hunt.ts --minutes 10 --quiesce 5`
 * (the first catching seed counting from 1, seeds whose clean run fails
 * skipped); they change when the harness or the workload does: re-run the
 * hunt and update the table (and the README's). The bugs recorded before the
 * replica profile existed run with it off (`--replicas off`: their seeds draw
 * exactly what they drew then); the replica bugs with it on (`--replicas on`). Every bug but
 * the HA ones runs with the HA profile off (`--ha off`), the HA ones with it on (`--ha on`).
 * The bugs recorded before serving through an agent outage existed run with it off (`--outage off`),
 * the later ones with it on (the default). The HA fence bugs were found with `--ha on --replicas off` and, for the double win, three
 * lease-stream leader changes a minute (test/sim/README.md, HA profile).
 */
const overrides: Partial<SimOptions> = { durationMs: 10 * 60_000, quiesceMs: 5 * 60_000, replicaProfile: false, haProfile: false, laterFaults: false, outageServing: false };

/** Bugs recorded after a fault type of `laterFaultTypes` existed hunt with it as the seed draws it. */
const laterOverrides: Partial<SimOptions> = { durationMs: 10 * 60_000, quiesceMs: 5 * 60_000, replicaProfile: false, haProfile: false, outageServing: false };

/** Bugs recorded once serving through an agent outage existed hunt with it on (the default), as `npm run sim` runs. */
const outageOverrides: Partial<SimOptions> = { durationMs: 10 * 60_000, quiesceMs: 5 * 60_000, replicaProfile: false, haProfile: false };

/** The replica planted bugs are hunted with the replica profile on for every seed. */
const replicaOverrides: Partial<SimOptions> = { durationMs: 10 * 60_000, quiesceMs: 5 * 60_000, replicaProfile: true, haProfile: false, laterFaults: false, outageServing: false };

/**
 * The HA planted bug is hunted with the HA profile on (two coordinators, lease,
 * fencing) and the replica profile off, in the short profile's own 3 + 3 minutes.
 */
const haOverrides: Partial<SimOptions> = { replicaProfile: false, haProfile: true, laterFaults: false, outageServing: false };

/**
 * The double win needs a lease-stream leader change while both processes compete: the HA bugs'
 * options with three leader changes a minute (the world's draw is 0-2).
 */
const leaderChanges: Partial<SimOptions> = { ...haOverrides, haWorld: { streamLeaderChangesPerMinute: 3 } };

/**
 * An unfenced audit publish flushed by a resumed ex-leader lands behind its successor's events only
 * as a copy, once the pause outlasted the stream's duplicate window (otherwise JetStream drops it as
 * a duplicate of the successor's re-publish from the journal): the HA bugs' options with a 2 s window,
 * shorter than the leader pauses (hunted with `--dup-window-ms 2000`).
 */
const longPauses: Partial<SimOptions> = { ...haOverrides, natsDupWindowMs: 2_000 };

/**
 * A Free() past the agent's fence needs an ex-leader's FreeBackend to reach an agent after a newer
 * epoch did (stamped while its lease held, delivered late): graceful busy-timeout evictions that
 * wait for calls in flight send Frees often, with the HA bugs' options.
 */
const busyStops: Partial<SimOptions> = {
  ...haOverrides,
  policy: { limitPerNode: 2, idleCheck: true, idleTimeoutMs: 5_000, busyCheck: true, busyTimeoutMs: 2_000, forceEvictionWhenBusy: false, tickIntervalMs: 1_000 },
};

/**
 * Short idle and busy timeouts (the seed's policy replaced): with the seeds'
 * own timeouts (T_busy ≥ 30 s, calls ≤ 3 s unless slow) no pending stop meets
 * a busy check, so "idle-busy-see-pending" was not caught in 80 seeds.
 */
const shortTimeouts: Partial<SimOptions> = {
  ...overrides,
  policy: { limitPerNode: 2, idleCheck: true, idleTimeoutMs: 5_000, busyCheck: true, busyTimeoutMs: 2_000, tickIntervalMs: 1_000 },
};

/**
 * Bugs recorded once the later faults and serving through an agent outage existed, in the HA profile:
 * both as the seed draws them, replicas off (hunted with `--ha on --replicas off`).
 */
const haLaterOverrides: Partial<SimOptions> = { replicaProfile: false, haProfile: true };

/** Prefix routing runs on replicated models only: the replica profile on (hunted with `--replicas on --ha off`), the later faults and outage serving as the seed draws them. */
const prefixOverrides: Partial<SimOptions> = { durationMs: 10 * 60_000, quiesceMs: 5 * 60_000, replicaProfile: true, haProfile: false };

/** Bug → the first seed (from 1) that catches it, the invariant that did, and the options if not the default ones. */
const recorded: Record<PlantedBug, { readonly seed: number; readonly invariant: string; readonly options?: Partial<SimOptions> }> = {
  "forget-on-failed-stop": { seed: 2, invariant: "1 no amnesia" },
  "register-again-without-asking-loader": { seed: 1, invariant: "8 no phantoms" },
  "report-remote-failure-before-drop": { seed: 1, invariant: "8 no phantoms" },
  "restore-request-snapshot": { seed: 2, invariant: "4 request conservation" },
  "count-failed-stops-as-evicted": { seed: 3, invariant: "2 memory accounting" },
  "idle-busy-see-pending": { seed: 9, invariant: "4 request conservation", options: shortTimeouts },
  "admission-ignores-pending": { seed: 3, invariant: "2 memory accounting" },
  "inflight-below-zero": { seed: 2, invariant: "4 request conservation" },
  "route-to-stopping": { seed: 1, invariant: "6 no dropped new requests" },
  "publish-before-append": { seed: 1, invariant: "10 audit completeness" },
  "stop-without-incarnation-check": { seed: 68, invariant: "7 eviction selection" },
  "forget-intents-of-unregistered-nodes": { seed: 2, invariant: "1 no amnesia" },
  "adopt-confirmed-gone": { seed: 11, invariant: "5 no resurrection" },
  "scale-down-below-min": { seed: 1, invariant: "replicas: min", options: replicaOverrides },
  "agent-ignores-leader-epoch": { seed: 2, invariant: "HA 2 stale epoch applied", options: haOverrides },
  "exleader-append-accepted": { seed: 14, invariant: "HA 6 ex-leader's append accepted", options: haOverrides },
  "free-past-fence": { seed: 14, invariant: "HA 2 stale epoch applied", options: busyStops },
  "fixed-recovery-window": { seed: 102, invariant: "HA 8 placement on ground truth", options: haOverrides },
  "two-leaders-one-epoch": { seed: 22, invariant: "HA 1 one leader", options: leaderChanges },
  "delta-against-wrong-base": { seed: 8, invariant: "1 no amnesia" },
  "orphan-without-model": { seed: 2, invariant: "orphan group", options: laterOverrides },
  "admission-lowest-class-first": { seed: 1, invariant: "admission class order", options: laterOverrides },
  "audit-publish-unfenced": { seed: 29, invariant: "HA 7 no event from an ex-leader", options: longPauses },
  "route-probe-failed": { seed: 2, invariant: "outage routing", options: outageOverrides },
  "admission-principal-keeps-turn": { seed: 9, invariant: "admission fair share", options: outageOverrides },
  "place-before-inventory": { seed: 2, invariant: "HA 8 placement on ground truth", options: haLaterOverrides },
  "resume-any-key": { seed: 2, invariant: "HA 1 one leader", options: haOverrides },
  "prefix-ignores-margin": { seed: 1, invariant: "prefix margin", options: prefixOverrides },
  "unchanged-ignores-missing": { seed: 47, invariant: "unchanged heartbeat", options: outageOverrides },
};

/** Clean runs, one per seed and options, shared by the bugs caught on it. */
const clean = new Map<string, Promise<SeedOutcome>>();
function cleanRun(seed: number, options: Partial<SimOptions>): Promise<SeedOutcome> {
  const key = `${String(seed)} ${options === overrides ? "" : JSON.stringify(options)}`;
  let p = clean.get(key);
  if (p === undefined) {
    p = runWithBug(seed, undefined, options);
    clean.set(key, p);
  }
  return p;
}

describe("planted bugs are caught by the simulation", () => {
  it("every planted bug has a recorded seed", () => {
    expect(plantedBugNames.filter((b) => recorded[b].seed < 1)).toEqual([]);
  });

  for (const bug of plantedBugNames) {
    const { seed, invariant, options = overrides } = recorded[bug];
    it(`${bug}: seed ${String(seed)} reports a violation (${invariant}) with the bug and none without it`, async () => {
      const planted = await runWithBug(seed, bug, options);
      if (planted.t === "threw") throw new Error(`seed ${String(seed)} with ${bug} threw: ${planted.error}`);
      // Any checker's report counts (the clean run below rules out a false alarm); the recorded one says which caught it when recorded.
      expect(planted.violations.length, `expected a violation (recorded: ${invariant}); re-run the hunt if the harness changed`).toBeGreaterThan(0);
      const without = await cleanRun(seed, options);
      expect(without.t === "ran" ? without.violations : without.error).toEqual([]);
    });
  }
});
