import { describe, expect, it } from "vitest";
import { runSeed } from "./run/run-seed.js";
import { optionsForSeed, type SimProfile } from "./run/sim-options.js";

/**
 * Seeds that once failed, each kept as a permanent regression test with the
 * profile it failed in (see test/sim/FINDINGS.md). Every one failed before its fix.
 * They were found before the replica profile existed and run with it off, so
 * each replays its recorded trace exactly (replica seeds: `replicaSeeds`).
 */
const regressionSeeds: readonly (readonly [number, SimProfile, string])[] = [
  // Port recycled while the loader still held the old incarnation: adopting the new one threw from
  // NodeTable.heartbeat (and left a half-adopted held instance). Fixed in loader adoption.ts.
  [2, "long", "adoption on a recycled address"],
  // Simulator: a crashed generation's late load failure wrote to the simulated disk; the torn-tail cut
  // then dropped fsync'd records after it, and an acknowledged evictionStarted never reached the stream.
  [1, "long", "a crash never drops an fsync'd journal record"],
  // Checker: calls open when an operator forgot an instance were counted against its re-adopted self.
  [10, "long", "forget resets the call count (LRU)"],
  [17, "long", "forget resets the call count (memory)"],
  [37, "long", "forget resets the call count (LRU, 2)"],
  // Simulator: a report sent to a crashed generation was handed to its successor, re-adopting an
  // incarnation the old generation had confirmed stopped.
  [36, "long", "messages die with the generation they were sent to"],
  // Warden: a leftover was reaped on one inventory lacking it; a delayed inventory from before its
  // start (or before the coordinator's restart) forgot a live, recorded process. Fixed in cluster
  // reconcile-inventory.ts (two inventories in a row, as for ready instances).
  [336, "short", "a leftover is reaped only when two inventories lack it (abandoned load)"],
  [680, "short", "a leftover is reaped only when two inventories lack it (failed stop)"],
  // Warden: an operator forgot a leftover while its stop RPC was in flight; the next inventory
  // re-adopted it as remote-only, so it was routed to (194) and stopped a second time (673). Fixed in
  // loader stop-rpcs.ts (a second stop joins the one in flight) and cluster reconcile-inventory.ts
  // (an incarnation with a stop in flight is adopted as a leftover, never routable).
  [194, "short", "no call is routed to an instance whose stop is in flight after a forget"],
  [673, "short", "a stop in flight before a forget is joined, never sent twice"],
  // Warden: a node declared lost while a load ran there dropped the loading instance but not the
  // load; the live process was re-adopted from the returning node's inventory, then the load's
  // failure dropped that adoption (and its record), leaving a process nobody holds. Fixed in loader
  // instance-exits.ts (node lost / forget abandon the load) and load-path.ts, fail-load.ts (a load whose
  // instance was dropped stops there and undoes nothing it no longer owns).
  [209, "short", "node lost during a load abandons the load"],
  // Simulator: an idle eviction started in the last second of the quiet phase and convergence was
  // judged mid-stop (its local half dropped, the process not yet dead). The quiet phase now lets the
  // stops in flight answer (bounded) before the checks.
  [791, "short", "convergence is judged once the stops in flight have answered"],
  // Warden: an agent restarted after its wall clock stepped back has an older boot epoch; its
  // heartbeats were "stale" forever and it was never told to register again (lost for good, its
  // processes unheld). Fixed in cluster heartbeat-order.ts: any other epoch means register again.
  [778, "short", "an agent whose boot epoch went back registers again"],
  [984, "short", "an agent whose boot epoch went back registers again (leftover)"],
  // NodeTable measured lost-after from the last heartbeat: after a coordinator stall past grace +
  // lost-after, a node went ready → lost in one checkHealth once the mass-unreachability guard was
  // off (or lifted). Lost-after now counts from when the node was seen unreachable.
  [818, "short", "a stalled coordinator loses no node on waking"],
  // Checker: judged a lost node when its event was delivered; a stall had held the event while
  // the heartbeats of the stall's end came in. Now judged in the step of the decision.
  [557, "short", "node-lost judged at decision time"],
  [40, "short", "node-lost judged at decision time (2)"],
  // Checker: a node that had just registered (its record new, as Warden counts it heard) was taken as silent.
  [617, "short", "a registration is contact"],
  // Checker: evictions were judged when the audit event was delivered, against the policy and the
  // calls of that moment; a stall or a policy change in between made idle/busy decisions look early.
  // Now judged when the loader emits eviction.started.
  [269, "short", "idle eviction judged against the policy it used"],
  [976, "short", "busy eviction judged against the calls it saw"],
  // Warden: an operator forgot a leftover while its retry (a stop RPC) was out; the returning node's
  // inventory re-adopted it as a leftover, whose first retry came while the old one still ran and was
  // dropped (one attempt at a time), and the old one then returned "removed meanwhile": the process
  // had no retry ever again. Fixed in loader leftover-tracker.ts (a skipped attempt runs once the
  // running one settles).
  [163, "short", "a leftover re-adopted during its forgotten self's retry is still retried"],
  // Warden: an agent that restarted (new boot epoch) re-registered without a credential and was
  // taken as unvouched until its next heartbeat; a coordinator stall then left all 3 real nodes
  // silent while the guard counted 2, and n3 was declared lost. Fixed in cluster node-table.ts: a
  // re-registration keeps the vouching the node id already earned.
  [250, "short", "a restarted agent still counts toward the mass-unreachability guard"],
  // Checker: a node that registered once between crashes and never heartbeated was counted as
  // silent, so 3 of 3 looked like a full disruption; Warden (rightly) counts 2 vouched
  // nodes and declared one lost after lost-after. The checker now counts what the rule counts.
  [2921, "short", "an unvouched registration is not part of the full-disruption count"],
  // Checker: n1's only heartbeat overtook its registration (answered register-required) and it was
  // then partitioned or stalled for good; waking from a 30 s stall, Warden counted the 2 vouched
  // nodes, both just unreachable, and declared n1 lost after lost-after. The checker counted n1 too,
  // as the node just declared, so 3 of 3 looked silent; the declared node is now excused only from
  // the lost filter, not from vouching.
  [3193, "short", "the unvouched node just declared lost is not part of the full-disruption count"],
  // Simulator: a duplicated start message, delayed past the stop of its incarnation, reached the
  // agent after the record was dropped and spawned that incarnation a second time; Warden (rightly)
  // did not adopt an incarnation its stop had confirmed gone. The simulated agent now never starts
  // an incarnation twice, as the real agent's StartRegistry.
  [3488, "short", "a repeated start never spawns an incarnation again"],
  // Warden: an abandoned load journals its stop intent without waiting; an operator forgot the
  // instance before the fsync, and the outbox's clear found no intent yet and did nothing. The open
  // intent of an incarnation the loader no longer knew was then "reaped" on a delayed inventory from
  // before the start while the process ran. Fixed in outbox outbox.ts (an intent counts from when
  // its record is issued, so a clear issued meanwhile clears it).
  [3826, "short", "a forget before the stop intent's fsync clears the intent"],
  // Simulator: a re-delivered copy of the last heartbeat applied (an old boot's, the agent since
  // restarted and partitioned from its register-required answers) left the record at that report's
  // (boot epoch, sequence), so the harness called it applied and the checker took it as contact;
  // Warden (rightly) ignored it as stale and declared the node lost after lost-after. A report the
  // record already held is no longer "applied".
  [5069, "short", "a copy of the last heartbeat applied is not contact"],
  // Checker: a remote stop failed at the lifecycle lock (a load held it; nothing was sent) and the
  // loading instance rightly stayed registered; the load then failed on a keepalive timeout and its
  // abandoned-load leftover retry sent a StopBackend before the evictionFailed record was committed,
  // which the checker took for the eviction's own. The phantom checker now judges at the loader's decision.
  [5179, "short", "a stop that failed at the lock sent nothing (later leftover retry not its own)"],
  // Warden: an admin stop of m2 waited on calls to its process, which then crashed; the agent
  // recycled its port for m1 while the stop was pending, and request state (keyed by address) kept
  // the dead process's calls, so m1 was busy since before it existed and the busy-killer evicted it
  // 12 s after its load. Fixed in watchdog instance-lifecycle.ts: a new incarnation on an address
  // starts with fresh request state (the predecessor's completions become no-ops).
  [18428, "short", "a recycled address does not inherit the predecessor's calls"],
  // Warden: a loading instance's process died unnoticed and the agent gave its port to the next
  // process, which the loader later adopted while the stale record's stop was still out; the
  // adopted one's stop failed at the lifecycle lock and the settle took the older, stale record at
  // the address for a "replacement registered meanwhile" (row 1): the loader kept holding it, the
  // watchdog no longer counted it, and a start went past the per-node limit. Fixed in watchdog
  // settle.ts (only a record that took the address later is a replacement; unit test in
  // watchdog-core.test.ts). Simulator: the death went unnoticed because a backend that exits during
  // its load never reported LOAD_FAILED on its start stream (the exit dropped the record before the
  // check); fixed in world/sim-agent.ts, after which this seed no longer reaches the settle.
  [14857, "short", "an older stale record on a recycled address is no replacement at settle"],
  // Warden: a coordinator generation crashed while m0 was loading on a node (its start stream died
  // with it; the agent's load goes on, and inventories list it LOADING, which reconcile rightly leaves
  // alone). A later remote-only unload of m0 (stop-blocked-by-load: a load of m0 holds its lifecycle
  // lock) took every non-exited inventory entry for a hit and adopted the loading one remote-only as
  // ready; its stop failed at the lock after 2 s (row 3: registered again) and the waiting load leased
  // a backend that never reported ready. Fixed in loader unload.ts (a hit the agent does not list
  // READY without a stop requested — NodeTable.findModel's `ready` — becomes a leftover, never
  // routable; unit tests in loader-unload.test.ts, node-table.test.ts).
  [34087, "short", "a remote-only unload never adopts a loading instance as routable"],
  [35615, "short", "a remote-only unload never adopts a loading instance as routable (its stop failed at the lock)"],
  // Checker: back-to-back event-loop stalls ran an operator's forget of m4 on n2, its re-adoption
  // from n2's inventory and five calls routed to it all at 379918 ms; the busy-killer rightly
  // evicted it at 439918 ms (oldest call 60 s > T_busy 59 s), but the selection checker dropped
  // calls started at or before the forget's millisecond, so its oldest was the 409918 ms one
  // ("only 30000ms old"). The forget now records the last request id routed, not the time.
  [28758, "short", "calls routed in the forget's own millisecond count after a re-adoption"],
  // Warden: a config reload dropped m3 while n3 was unreachable; its config unload failed and m3
  // became a leftover recorded with the groups it had then — none, the model was out of the config.
  // The next reload brought m3 back in group g2, but the leftover's occupancy entry kept no groups,
  // so m0 (g2) was admitted and started on n3 while m3 still ran there. Fixed in loader
  // loader-state.ts: leftover and orphan entries conflict by their model's groups as configured
  // now, re-pushed on every reload and UpdatePolicy (unit test in leftover-groups.test.ts).
  [48116, "short", "a leftover conflicts by its model's current groups"],
  // The 100 000-seed campaign on 8bc9218 failed on these too; each replays clean on main
  // after the fixes above, whose invariants they share (recycled addresses: 18428, 14857; remote-only
  // adoption: 34087; leftover groups: 48116).
  [53162, "short", "campaign 8bc9218: convergence (a leftover left)"],
  [53626, "short", "campaign 8bc9218: a same-group start beside a running model"],
  [55078, "short", "campaign 8bc9218: a start past the per-node limit"],
  [60090, "short", "campaign 8bc9218: a busy eviction for calls not its own"],
  [64816, "short", "campaign 8bc9218: a same-group start beside a running model (2)"],
  [79624, "short", "campaign 8bc9218: a busy eviction for calls not its own (2)"],
  [83672, "short", "campaign 8bc9218: a start past the per-node limit (2)"],
  [88225, "short", "campaign 8bc9218: a lease before the backend was ever ready"],
  [88871, "short", "campaign 8bc9218: a busy eviction for calls not its own (3)"],
  [95296, "short", "campaign 8bc9218: a start past the per-node limit (3)"],
  [96197, "short", "campaign 8bc9218: a start past the per-node limit (4)"],
  [97245, "short", "campaign 8bc9218: an inventory taken before a start lands after its Ready (the simulated agent waits for each heartbeat reply)"],
  [4153, "short", "campaign a0e6565: convergence waits for a leftover left by a stop that failed in the quiet phase (its reply lost)"],
  [26419, "short", "campaign a0e6565: convergence waits for a leftover left by a stop that failed in the quiet phase (2)"],
  [42934, "short", "campaign a0e6565: convergence waits for a leftover left by a stop that failed in the quiet phase (3)"],
];

/**
 * Seeds found with the replica checker, run as drawn: the replica
 * profile on or off as the seed draws it (checked, so a changed draw fails loudly).
 */
const replicaSeeds: readonly (readonly [number, boolean, string])[] = [
  // Warden: an on-demand load of m0 (max 1) waited in admission retries while a coordinator restart
  // re-adopted m0's running instance on n1; the load went on and started a second m0 on n2. Fixed in
  // loader admit-load.ts (an instance adopted meanwhile ends an on-demand load at its next placement
  // attempt, or gives back its reservation; unit test adopted-during-admission.test.ts).
  [24, false, "an instance adopted during a load's admission is no reason for a second copy"],
  [36, false, "an instance adopted during a load's admission is no reason for a second copy (2)"],
  [63, false, "an instance adopted during a load's admission is no reason for a second copy (3)"],
  // Warden: a reload unpinned m5; a replica load of m5 started before it admitted with its own copy of
  // the spec and pinned m5 again in the watchdog, and the stale pin let m2 past the per-node limit
  // (pins-only rule). Fixed in loader pins-and-groups-now.ts (admission and registration apply the pin and
  // groups as configured now; unit test stale-spec-pin.test.ts).
  [28, true, "a load that outlives a reload applies the pin configured now"],
];

/**
 * Replica seeds found by a campaign with `--replicas on`, run with the profile forced on
 * whatever the seed draws.
 */
const forcedReplicaSeeds: readonly (readonly [number, string])[] = [
  // Checker: the port-recycled fault's load names the node (as an operator's LoadModel does, which places
  // there past spread and maxReplicasPerModel), but only the admin step's named loads were exempt. A start
  // of that named load (seed 137: a follower's retry on its node after the leader it joined failed there
  // and left a leftover) was reported as one beside the leftover. Fixed in the harness
  // (GroundTruth.explicitLoad counts both).
  ...[137, 1000, 1051, 1226, 1387, 1400, 1779, 1842, 2051, 2070, 2153, 2486, 2654].map((seed) => [seed, "a load naming a node is the operator's placement, not a spread breach"] as const),
  // Warden: a replica adopted during a min load's admission (a coordinator restart) was put pending
  // eviction at once; the load counted live replicas only and started another, past max should the
  // stop fail. Fixed in loader replica-not-needed.ts (floor and scale-up loads count the replicas being
  // stopped toward max before every attempt, as the reconciler does; unit test replica-stopping-count.test.ts).
  [245, "a floor load counts the replicas being stopped toward max"],
  [1539, "a floor load counts the replicas being stopped toward max (2)"],
  [2381, "a floor load counts the replicas being stopped toward max (3)"],
  // Warden: m2 (max 1) was adopted on n3 while a restarted coordinator's on-demand load waited in
  // admission; a stall made n3 unreachable before the load's next attempt, which saw no routable
  // replica and started a second m2 on n0. Fixed in loader served-meanwhile.ts (replicas filling max on an
  // unreachable node end the load, as they answer a call; unit test adopted-during-admission.test.ts).
  [2878, "replicas filling max on an unreachable node end an on-demand load in admission"],
  // Simulator: a duplicated start message of a running incarnation answered "failed ALREADY_EXISTS"
  // on the original stream ahead of its Spawned; the real agent attaches the repeat to the start.
  [1406, "a duplicated start message is absorbed while its process runs"],
  // Warden: one placeable node at its limit and two min-2 models: every floor load evicted its own
  // model's replica or the other's floor replica by LRU, so no breaker ever opened and the node
  // churned for ever. Fixed in loader replica-spare.ts and watchdog enforcement.ts (a replica load
  // spares those; unit tests replica-floor-churn.test.ts, admission-spare.test.ts).
  [788, "a replica load never evicts its own model's replicas or another model's floor"],
  // Warden: a reload changed m2's options (min 2) while its floor was half restored; the rollout kept
  // the one live replica it began with, so once the floor's second replica was ready it stopped the stale
  // one, leaving 1 ready. Fixed in loader replica-reconciler.ts (rolloutKeep: never below min; unit test
  // replica-rollout.test.ts).
  [8, "a rollout keeps at least min ready"],
];

/**
 * HA profile seeds, forced on: two coordinators, the lease, fencing and partitions.
 * Together they take over, pause a leader, cut it from the lease and the agents, change the lease
 * stream's leader, free backends, and have commands held by a partition applied late by agents
 * the new leader had not commanded yet.
 */
const haSeeds: readonly number[] = [14, 19, 4];

/**
 * HA seeds that broke an invariant on the code before the HA fences, in the world as it bit in
 * reality (Free() past the agent, a resumed ex-leader's stale timers, slow-following agents, the
 * lease CAS during a stream leader change), run as drawn with the profile forced on. Each must
 * hold every invariant now.
 */
const haRegressionSeeds: readonly (readonly [number, string])[] = [
  // A resumed ex-leader's node.unreachable / eviction.started / stop intents were accepted by the
  // journal after the new leader's records (HA 6). Fixed: the journal's epoch fence, mayAct.
  [7, "a resumed ex-leader appends nothing to the journal"],
  [10, "a resumed ex-leader appends nothing to the journal (2)"],
  [17, "a resumed ex-leader appends nothing to the journal (3)"],
  // A takeover placed a model beside a journaled instance its node had not reported yet (HA 8).
  // Fixed: unconfirmed journaled instances count for groups, the limit and replicas.
  [15, "a takeover counts the journal's unconfirmed instances"],
  [18, "a takeover counts the journal's unconfirmed instances (2)"],
  [22, "a takeover counts the journal's unconfirmed instances (3)"],
  // After a takeover a node reported the old leader's load of a max-1 model still loading, neither
  // known to the new leader nor journaled (its record never landed): it occupied the node for groups
  // and the limit, but replica counting missed it and a second replica started there (HA 8,
  // maxReplicasPerModel). Fixed in cluster placement-view.ts (Loader.startingElsewhere counts as a
  // replica; unit test placement-view-replicas.test.ts).
  [35, "a load its node reports starting, unknown to the new leader, counts as a replica there"],
  [78, "a load its node reports starting, unknown to the new leader, counts as a replica there (2)"],
  // Checker: HA 8 counted a process an operator had forgotten (ForgetInstance: it no longer counts,
  // audited) because its node still reported it or the journal named it; the other checkers exempt a
  // forgotten instance. Now exempt unless Warden holds it again.
  [28, "a forgotten instance is the operator's word, not Warden's to count"],
  [60, "a forgotten instance is the operator's word, not Warden's to count (2)"],
  // Simulator: a StartBackend stream's messages each had their own delay and loss, so its end
  // overtook its Spawned or Ready (a load "ended without ready" whose process ran on, counted by
  // nobody, and a second copy started beside it). One gRPC stream delivers in order, nothing after a
  // lost message (HaWorld.orderedStartStreams, the HA world only).
  [67, "a start stream's end never overtakes its Ready"],
  [68, "a start stream's end never overtakes its Ready (2)"],
  // A load given up before its Spawned arrived (the stream broke under a partition) was dropped with
  // nothing to stop; its process loaded on, counted nowhere, and a second replica of the max-1 model
  // started beside it (HA 8). Fixed in loader unknown-outcome-start.ts (it counts on its node as an
  // unconfirmed instance until the node reports; unit test unconfirmed-placement.test.ts).
  [73, "a start of unknown outcome counts on its node until the node reports"],
  // A resumed ex-leader's events reached the audit stream after the new leader's (HA 7). Fixed: mayPublish.
  [75, "a resumed ex-leader publishes nothing"],
  // An orphan's stop (pid:<n>) left unsettled by a leader that lost its lease became a stop intent at
  // the takeover, restored as a leftover, and the new leader sent StopBackend naming "pid:1012" (12).
  // Fixed in unsettled-evictions.ts: an orphan's unsettled stop gets no intent (the orphan tracker owns it).
  [561, "an orphan's unsettled stop is the orphan tracker's, never a StopBackend"],
  // The previous leader gave up a load before its Spawned (outcome unknown) and journaled a terminal
  // backend.load-failed; the new leader placed a second replica of the max-1 model on that node
  // before its first inventory (HA 8). The failure now says `outcomeUnknown`, is not terminal, and
  // the takeover counts the instance on its node until the node reports.
  [243, "a start of unknown outcome journaled by the previous leader counts on its node after a takeover"],
  // Checker: HA 8 now counts everything an agent holds on a node that registered with the leader and
  // has not sent its first inventory (the leader must wait for it). It found an operator's LoadModel
  // naming such a node started beside two backends a crashed leader had started and never journaled
  // (over the limit). Fixed in loader admit-load.ts: a load naming the node waits for its report.
  [65, "a load naming a node that has not reported yet waits for its inventory"],
];

describe("simulation", () => {
  it("is deterministic: the same seed twice gives the same trace hash", async () => {
    const a = await runSeed(11);
    const b = await runSeed(11);
    expect(a.steps).toBeGreaterThan(1_000);
    expect(b.traceHash).toBe(a.traceHash);
    expect(b.steps).toBe(a.steps);
    const c = await runSeed(12);
    expect(c.traceHash).not.toBe(a.traceHash);
  });

  it.each(regressionSeeds)("regression seed %i (%s profile: %s) holds every invariant", async (seed, profile) => {
    const r = await runSeed(seed, { profile, overrides: { replicaProfile: false, haProfile: false, laterFaults: false } });
    expect(r.violations).toEqual([]);
  }, 120_000);

  it.each(replicaSeeds)("replica regression seed %i (replica profile %s: %s) holds every invariant", async (seed, replicas) => {
    expect(optionsForSeed(seed).replicaProfile === true).toBe(replicas);
    const r = await runSeed(seed, { overrides: { haProfile: false, laterFaults: false } });
    expect(r.violations).toEqual([]);
  }, 120_000);

  it("HA profile: deterministic, and its seeds take over, fence and hold every invariant", async () => {
    const a = await runSeed(14, { overrides: { haProfile: true } });
    const b = await runSeed(14, { overrides: { haProfile: true } });
    expect(b.traceHash).toBe(a.traceHash);
    const total = new Map<string, number>();
    for (const seed of haSeeds) {
      const r = seed === 14 ? a : await runSeed(seed, { overrides: { haProfile: true } });
      expect(r.violations, `HA seed ${String(seed)}`).toEqual([]);
      for (const [k, v] of Object.entries(r.coverage)) total.set(k, (total.get(k) ?? 0) + v);
    }
    for (const k of ["ha.takeover", "ha.zombie-applied-unfenced", "ha.pause", "ha.lease-partition", "ha.agent-partition", "ha.step-down.lease-expiring", "ha.backend-freed", "ha.stream-leader-change"]) expect(total.get(k) ?? 0, k).toBeGreaterThan(0);
  }, 120_000);

  it.each(haRegressionSeeds)("HA regression seed %i (%s) holds every invariant", async (seed) => {
    const r = await runSeed(seed, { overrides: { haProfile: true, laterFaults: false } });
    expect(r.violations).toEqual([]);
  }, 120_000);

  it.each(forcedReplicaSeeds)("replica regression seed %i (replica profile forced on: %s) holds every invariant", async (seed) => {
    const r = await runSeed(seed, { overrides: { replicaProfile: true, haProfile: false, laterFaults: false } });
    expect(r.violations).toEqual([]);
  }, 120_000);
});
