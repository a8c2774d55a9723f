import type { PolicyPatch } from "@warden/watchdog";
import { modelSpec, type ModelSpec } from "@warden/loader";
import { SimRandom } from "../kernel/sim-random.js";
import type { LinkOptions } from "../world/sim-network.js";
import { drawReplicas, replicaStream } from "./replica-profile.js";
import { defaultHaWorld, drawHa, drawHaWorld, type HaOptions, type HaWorld } from "../ha/ha-profile.js";
import type { AdmissionSettings } from "@warden/admission";

/** Every fault type the simulator injects (reliability.md F-table). */
export const faultTypes = [
  "stop-error",
  "stop-deadline",
  "stop-reply-lost",
  "stop-blocked-by-load",
  "remote-stop-fails-after-local-drop",
  "agent-crash-records",
  "agent-crash-amnesia",
  "agent-paused",
  "partition-symmetric",
  "partition-asymmetric",
  "coordinator-crash",
  "stale-inventory",
  "backend-crash",
  "slow-backend",
  "port-recycled",
  "nats-outage-long",
  "nats-ack-lost",
  "journal-torn-tail",
  "completion-twice",
  "memory-flap",
  "wall-clock-jump",
  "event-loop-stall",
] as const;

/**
 * Fault types added after the seeds above were recorded: each is enabled per seed from a stream of
 * its own (`<options stream>-later-faults`) and appended after the others, so a seed where none is
 * enabled draws, plans and runs exactly what it did before.
 * - `agent-crash-before-record`: the agent is killed -9 right after its next spawn (within the
 *   fault's duration), before it writes that backend's record, and restarts with its other records;
 *   the restarted agent finds the marked process without a record and reports it as an orphan
 *   with the model from its mark.
 */
export const laterFaultTypes = ["agent-crash-before-record"] as const;

/** Every fault type, in the order their enabling is drawn. */
export const allFaultTypes = [...faultTypes, ...laterFaultTypes] as const;

export type FaultType = (typeof allFaultTypes)[number];

/** A fault as a seeded option: how often, how long, and which nodes it may hit. */
export interface FaultOption {
  readonly type: FaultType;
  /** Expected injections per simulated minute. */
  readonly perMinute: number;
  readonly durationMs: number;
  readonly targets: readonly string[];
}

export interface SimNodeSpec {
  readonly nodeId: string;
  readonly labels: Record<string, string>;
  readonly embedded: boolean;
  readonly memoryTotalBytes: number;
  /** The agent's `maxReplicasPerModel` (sent with Register); undefined = the default (1), not sent. */
  readonly maxReplicasPerModel?: number;
}

/** A run's configuration: a pure function of the seed (plus overrides). */
export interface SimOptions {
  readonly seed: number;
  readonly durationMs: number;
  /** Fault-free tail in which the cluster must converge (invariant 9). */
  readonly quiesceMs: number;
  readonly nodes: readonly SimNodeSpec[];
  readonly models: readonly ModelSpec[];
  readonly policy: PolicyPatch;
  readonly heartbeatMs: number;
  readonly nodeGraceMs: number;
  readonly nodeLostAfterMs: number;
  readonly orphanGraceMs: number;
  readonly recoveryWindowMs: number;
  readonly sigtermGraceMs: number;
  readonly stopRpcTimeoutMs: number;
  readonly keepaliveMs: number;
  /** The agent kills a start not ready within this (its readiness deadline). */
  readonly agentReadinessTimeoutMs: number;
  readonly link: LinkOptions;
  readonly faults: readonly FaultOption[];
  /** Inference calls per simulated minute. */
  readonly callsPerMinute: number;
  /** JetStream's `duplicate_window` (the stream's config; 2 min in production). */
  readonly natsDupWindowMs: number;
  /** Admin operations per simulated minute. */
  readonly adminPerMinute: number;
  /**
   * A planted bug switched on in the production code for this
   * run; passed to the coordinator assembly (coordinator/planted-bug.ts).
   */
  readonly plantedBug?: string;
  /**
   * The replica profile (run/replica-profile.ts): replicated models, per-node
   * `maxReplicasPerModel` and bursts of calls that scale them up and down.
   * Drawn per seed (the profile table's `replicaP`); an override forces it on or off.
   */
  readonly replicaProfile?: boolean;
  /**
   * The HA profile (ha/ha-profile.ts): two coordinators, a lease, fencing, partitions. Drawn per
   * seed (`haP`, own stream); the override forces it on or off. `ha` holds the draw when on.
   */
  readonly haProfile?: boolean;
  /** HA profile: parts of the world's realism replaced (switched off), over the seed's draw (`--ha-world JSON`). */
  readonly haWorld?: Partial<HaWorld>;
  readonly ha?: HaOptions;
  /**
   * `false`: the fault types of `laterFaultTypes` are never enabled — the recorded regression
   * and planted-bug seeds run with it, so they replay the scenario they were recorded with.
   */
  readonly laterFaults?: boolean;
  /**
   * Models with an admission gate (classes, fair sharing, shedding) and their settings: calls to
   * them go through the production AdmissionGate first. Drawn per seed from its own stream.
   */
  readonly admission?: Readonly<Record<string, AdmissionSettings>>;
  /**
   * Serving through an agent outage (nodes/outage-serving.ts): ready instances
   * of an unreachable node stay routable while the coordinator's own probe
   * answers. On unless `false` — the planted-bug seeds recorded before it run
   * without it, so they replay the scenario they were recorded with.
   */
  readonly outageServing?: boolean;
  /**
   * How a heartbeat whose inventory is unchanged (an empty delta on a settled
   * node) is handled: `differential` (the default) runs the full reconcile in
   * its place and the `unchanged heartbeat` checker reports anything it changed
   * that the skip would have left; `skip` takes the skip as production does;
   * `full` reconciles every heartbeat whole. A correct skip gives all three
   * the same trace (`run/trace-hashes.ts --unchanged skip|full`).
   */
  readonly unchangedHeartbeats?: "differential" | "skip" | "full";
}

const GiB = 1024 ** 3;

/**
 * How long a seed runs and how its time scales are drawn. `short` (npm test,
 * the default campaign): a few simulated minutes with timeouts, fault
 * durations and the de-dup window compressed and fault rates raised, so that
 * every fault type and coverage counter shows up across ~1 000 seeds (VOPR
 * style: many short seeds). `long`: 30 + 15 simulated minutes with production-like
 * time scales (`npm run sim -- --long`); the regression seeds found there replay with it.
 */
export type SimProfile = "short" | "long";

/**
 * One option's value in a profile: a constant (no draw), an integer drawn from
 * [min, max] times `unit`, or one of a list. Whether an option draws is part
 * of the profile: a constant must stay a constant (and a range a range), or
 * every later draw of its seeds shifts and recorded seeds stop replaying.
 */
type Drawn = number | { readonly int: readonly [min: number, max: number]; readonly unit?: number } | { readonly pick: readonly number[] };

function draw(r: SimRandom, d: Drawn): number {
  if (typeof d === "number") return d;
  if ("pick" in d) return r.pick(d.pick);
  return r.int(d.int[0], d.int[1]) * (d.unit ?? 1);
}

/** The numbers that tell the profiles apart; `optionsForSeed` draws them in one fixed order. */
interface ProfileTable {
  /** The label of the options' random stream (kept per profile: it decides every draw). */
  readonly stream: string;
  readonly durationMs: number;
  readonly quiesceMs: number;
  readonly nodeCount: Drawn;
  readonly modelCount: Drawn;
  readonly loadTimeoutMs: Drawn;
  readonly heartbeatMs: Drawn;
  readonly idleTimeoutMs: Drawn;
  readonly busyTimeoutMs: Drawn;
  /** Chance that a seed enables each fault type. */
  readonly faultP: number;
  readonly faultPerMinute: Drawn;
  readonly faultDurationMs: Drawn;
  readonly nodeLostAfterMs: Drawn;
  readonly orphanGraceMs: Drawn;
  readonly recoveryWindowMs: Drawn;
  readonly sigtermGraceMs: Drawn;
  readonly stopRpcTimeoutMs: Drawn;
  readonly keepaliveMs: Drawn;
  readonly agentReadinessTimeoutMs: Drawn;
  readonly callsPerMinute: Drawn;
  readonly adminPerMinute: Drawn;
  readonly natsDupWindowMs: Drawn;
  /** Chance that a seed runs the replica profile (drawn from its own stream; 0 = never). */
  readonly replicaP: number;
  /** Chance that a seed runs the HA profile (drawn from its own stream; 0 = never). */
  readonly haP: number;
  /** Chance that a seed enables each of `laterFaultTypes` (own stream; 0 = never: the long profile's seeds replay exactly). */
  readonly laterFaultP: number;
}

const sec = 1_000;

const profiles: Readonly<Record<SimProfile, ProfileTable>> = {
  /** 3 faulty + 3 quiet simulated minutes, everything compressed ~5-10x. */
  short: {
    stream: "options-short",
    durationMs: 3 * 60_000,
    quiesceMs: 3 * 60_000,
    nodeCount: { int: [3, 5] },
    modelCount: { int: [3, 8] },
    loadTimeoutMs: { int: [10, 60], unit: sec },
    heartbeatMs: { pick: [1_000, 2_000, 3_000] },
    idleTimeoutMs: { int: [10, 120], unit: sec },
    busyTimeoutMs: { int: [10, 90], unit: sec },
    faultP: 0.5,
    faultPerMinute: { pick: [0.5, 1, 2, 3] },
    faultDurationMs: { int: [1, 40], unit: sec },
    // Above the 30 s event-loop stall (F15) plus grace, as in production: a stall alone must not lose a node.
    nodeLostAfterMs: { int: [45, 120], unit: sec },
    orphanGraceMs: { int: [10, 40], unit: sec },
    recoveryWindowMs: { int: [2, 6], unit: sec },
    sigtermGraceMs: { int: [1, 5], unit: sec },
    stopRpcTimeoutMs: { pick: [5_000, 10_000, 15_000] },
    keepaliveMs: 20_000,
    agentReadinessTimeoutMs: 60_000,
    callsPerMinute: { int: [10, 60] },
    adminPerMinute: { int: [2, 10] },
    natsDupWindowMs: { int: [15, 40], unit: sec },
    replicaP: 0.4,
    haP: 0.2,
    laterFaultP: 0.5,
  },
  /** 30 faulty + 15 quiet simulated minutes, production-like time scales (unchanged draws: its regression seeds replay exactly). */
  long: {
    stream: "options",
    durationMs: 30 * 60_000,
    quiesceMs: 15 * 60_000,
    nodeCount: { int: [3, 6] },
    modelCount: { int: [3, 10] },
    loadTimeoutMs: { int: [20, 120], unit: sec },
    heartbeatMs: { pick: [1_000, 2_000] },
    idleTimeoutMs: { int: [30, 600], unit: sec },
    busyTimeoutMs: { int: [30, 300], unit: sec },
    faultP: 0.45,
    faultPerMinute: { pick: [0.05, 0.1, 0.25, 0.5] },
    faultDurationMs: { int: [2, 120], unit: sec },
    nodeLostAfterMs: { int: [30, 300], unit: sec },
    orphanGraceMs: { int: [20, 120], unit: sec },
    recoveryWindowMs: { int: [3, 12], unit: sec },
    sigtermGraceMs: { int: [2, 10], unit: sec },
    stopRpcTimeoutMs: 15_000,
    keepaliveMs: 40_000,
    agentReadinessTimeoutMs: 150_000,
    callsPerMinute: { int: [5, 60] },
    adminPerMinute: { int: [1, 6] },
    natsDupWindowMs: 120_000,
    replicaP: 0,
    haP: 0,
    laterFaultP: 0,
  },
};

/**
 * Expands a seed into options, swarm style: each seed enables a random subset
 * of fault types. The draws happen in the order written here (object literal
 * fields are evaluated in order), the same for every profile.
 */
export function optionsForSeed(seed: number, overrides: Partial<SimOptions> = {}, profile: SimProfile = "short"): SimOptions {
  const p = profiles[profile];
  const r = new SimRandom(seed).fork(p.stream);
  const nodeCount = draw(r, p.nodeCount);
  const nodes: SimNodeSpec[] = [];
  const embedded = r.chance(0.4);
  for (let i = 0; i < nodeCount; i++) {
    nodes.push({ nodeId: `n${String(i)}`, labels: { zone: r.pick(["a", "b"]), gpu: r.pick(["small", "big"]) }, embedded: embedded && i === 0, memoryTotalBytes: r.int(8, 48) * GiB });
  }
  const groups = ["g1", "g2", "g3"];
  const models: ModelSpec[] = [];
  for (let i = 0, n = draw(r, p.modelCount); i < n; i++) {
    models.push(
      modelSpec({
        id: `m${String(i)}`,
        backend: "sim",
        groups: r.chance(0.3) ? [r.pick(groups)] : [],
        pinned: r.chance(0.1),
        sizeBytes: r.chance(0.8) ? r.int(1, 12) * GiB : 0,
        selector: r.chance(0.2) ? { zone: r.pick(["a", "b"]) } : {},
        loadTimeoutMs: draw(r, p.loadTimeoutMs),
      }),
    );
  }
  const heartbeatMs = draw(r, p.heartbeatMs);
  const policy: PolicyPatch = {
    limitPerNode: r.pick([0, 1, 2, 3, 4]),
    idleCheck: r.chance(0.5),
    idleTimeoutMs: draw(r, p.idleTimeoutMs),
    busyCheck: r.chance(0.4),
    busyTimeoutMs: draw(r, p.busyTimeoutMs),
    memoryReclaimer: r.chance(0.4),
    forceEvictionWhenBusy: r.chance(0.3),
    sizeAware: r.chance(0.3),
    tickIntervalMs: 1_000,
  };
  const faults: FaultOption[] = [];
  for (const type of faultTypes) {
    if (!r.chance(p.faultP)) continue;
    faults.push({ type, perMinute: draw(r, p.faultPerMinute), durationMs: draw(r, p.faultDurationMs), targets: r.subset(nodes.map((n) => n.nodeId), 0.6) });
  }
  // Fault types added later, from their own stream: a seed without them draws what it always did.
  const lr = new SimRandom(seed).fork(`${p.stream}-later-faults`);
  for (const type of laterFaultTypes) {
    if (overrides.laterFaults === false || !lr.chance(p.laterFaultP)) continue;
    faults.push({ type, perMinute: draw(lr, p.faultPerMinute), durationMs: draw(lr, p.faultDurationMs), targets: lr.subset(nodes.map((n) => n.nodeId), 0.6) });
  }
  // After every other draw, from its own stream: a seed without the profile draws what it always did.
  const rr = replicaStream(seed, p.stream);
  const replicaProfile = overrides.replicaProfile ?? (p.replicaP > 0 && rr.chance(p.replicaP));
  const replicated = replicaProfile ? drawReplicas(rr, nodes, models) : { nodes, models };
  // The HA profile, after that, from its own stream too. HA coordinators use remote agents only (HA contract).
  const hr = new SimRandom(seed).fork(`${p.stream}-ha`);
  // The chance is drawn even when forced, so a seed forced on draws what it draws when the profile falls to it.
  const drawnHa = p.haP > 0 && hr.chance(p.haP);
  const haProfile = overrides.haProfile ?? drawnHa;
  // The world's realism (slow followers, stream leader changes, ...) from a stream of its own: the profile's other draws are unchanged.
  const drawn = haProfile ? (overrides.ha ?? { ...drawHa(hr), world: drawHaWorld(new SimRandom(seed).fork(`${p.stream}-ha-world`)) }) : undefined;
  const ha = drawn === undefined || overrides.haWorld === undefined ? drawn : { ...drawn, world: { ...(drawn.world ?? defaultHaWorld), ...overrides.haWorld } };
  // Admission gates, from a stream of their own (a seed without them draws what it always did); small on purpose, so calls queue.
  const ar = new SimRandom(seed).fork(`${p.stream}-admission`);
  const admission: Record<string, AdmissionSettings> = {};
  // Off where later faults are off too: recorded regression and planted-bug seeds replay what they were recorded with.
  if (ar.chance(0.3) && overrides.laterFaults !== false) {
    for (const m of replicated.models) {
      if (!ar.chance(0.6)) continue;
      const maxQueued = ar.int(1, 6);
      admission[m.id] = { maxInFlightPerReplica: ar.int(1, 2), maxQueued, shedAtQueued: ar.int(0, maxQueued), maxQueuedPerPrincipal: ar.int(1, maxQueued), retryAfterMs: 1000 };
    }
  }
  const finalNodes = ha === undefined ? replicated.nodes : replicated.nodes.map((n) => (n.embedded ? { ...n, embedded: false } : n));
  return {
    seed,
    durationMs: p.durationMs,
    quiesceMs: p.quiesceMs,
    nodes: finalNodes,
    models: replicated.models,
    policy,
    heartbeatMs,
    nodeGraceMs: heartbeatMs * r.int(3, 6),
    nodeLostAfterMs: draw(r, p.nodeLostAfterMs),
    orphanGraceMs: draw(r, p.orphanGraceMs),
    recoveryWindowMs: draw(r, p.recoveryWindowMs),
    sigtermGraceMs: draw(r, p.sigtermGraceMs),
    stopRpcTimeoutMs: draw(r, p.stopRpcTimeoutMs),
    keepaliveMs: draw(r, p.keepaliveMs),
    agentReadinessTimeoutMs: draw(r, p.agentReadinessTimeoutMs),
    link: { baseDelayMs: r.int(1, 10), jitterMs: r.int(1, 50), lossP: r.pick([0, 0, 0.001, 0.01]), dupP: r.pick([0, 0.005, 0.02]), reorderP: r.pick([0, 0.01, 0.05]) },
    faults,
    callsPerMinute: draw(r, p.callsPerMinute),
    adminPerMinute: draw(r, p.adminPerMinute),
    natsDupWindowMs: draw(r, p.natsDupWindowMs),
    ...(replicaProfile ? { replicaProfile } : {}),
    ...(ha === undefined ? {} : { haProfile, ha }),
    ...(Object.keys(admission).length === 0 ? {} : { admission }),
    ...overrides,
  };
}
